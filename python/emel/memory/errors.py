"""The one exception type of emel.memory, shared by the C++ core and the reference.

Standard library only: the pure-Python reference raises it too.
"""

#: Every failure code the planner can raise (UML_OS.TMMU.PrepareMemory_v2).
FAILURE_CODES = (
    "INVALID_IR_SHAPES",
    "LIVENESS_CYCLE",
    "ALLOCATION_OVERFLOW",
    "ARENA_TOO_SMALL",
    "ALIGNMENT_VIOLATION",
    "ADDRESS_COLLISION",
    # A runtime size outside a symbolic dimension's envelope (shapes.PlanSession).
    "SHAPE_ENVELOPE_EXCEEDED",
)


class PlanError(ValueError):
    """A graph, a configuration or a plan that cannot be planned or trusted.

    ``code`` is one of :data:`FAILURE_CODES`; ``tensor``, ``node`` and ``arena``
    name what is wrong (``None`` when not applicable).
    """

    def __init__(self, code, message, tensor=None, node=None, arena=None):
        if code not in FAILURE_CODES:
            raise ValueError(f"unknown failure code {code!r}")
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message
        self.tensor = tensor
        self.node = node
        self.arena = arena

    def __reduce__(self):
        return (PlanError, (self.code, self.message, self.tensor, self.node, self.arena))
