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

#: Codes of the arena engine (docs/arenas.md), beside the planner's.
ENGINE_FAILURE_CODES = (
    "QUOTA_EXCEEDED",
    "DEBUG_FILL_FORBIDDEN",
    "ZEROING_REQUIRED",
    "ALLOCATION_FAILED",
    "INVALID_ARGUMENT",
)


class PlanError(ValueError):
    """A graph, a configuration or a plan that cannot be planned or trusted.

    ``code`` is one of :data:`FAILURE_CODES` (or, from the arena engine, of
    :data:`ENGINE_FAILURE_CODES`); ``tensor``, ``node`` and ``arena`` name what
    is wrong (``None`` when not applicable). A clobber found by
    ``verify_execution`` also sets ``step``, ``byte_offset`` and
    ``overwritten_by``.
    """

    step = None
    byte_offset = None
    overwritten_by = None

    def __init__(self, code, message, tensor=None, node=None, arena=None):
        if code not in FAILURE_CODES and code not in ENGINE_FAILURE_CODES:
            raise ValueError(f"unknown failure code {code!r}")
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message
        self.tensor = tensor
        self.node = node
        self.arena = arena

    def __reduce__(self):
        # Rebuild through PlanError.__init__ (the subclass's may take other
        # arguments), then restore every attribute set since: the engine's
        # step / byte_offset / overwritten_by, a subclass's own fields.
        return (_rebuild_plan_error, (type(self), self.code, self.message), dict(self.__dict__))


def _rebuild_plan_error(cls, code, message):
    err = cls.__new__(cls)
    PlanError.__init__(err, code, message)
    return err


#: The largest size, offset or count the core's uint64 arithmetic holds.
U64_MAX = 2**64 - 1


def is_int(value) -> bool:
    """A JSON integer: a Python int, but not a bool (JSON true/false are not integers)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_text(value) -> bool:
    """A string the core can take: UTF-8 encodable (a lone surrogate such as
    json.loads('"\\ud800"') is a str but not text)."""
    if not isinstance(value, str):
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_u64(value, what: str, tensor=None, arena=None) -> int:
    """``value`` as a uint64 size: not an integer >= 0 is INVALID_IR_SHAPES,
    above 2^64-1 is ALLOCATION_OVERFLOW; ``what`` starts the message, which
    names ``tensor`` or ``arena`` when given."""
    if not is_int(value) or value < 0:
        raise PlanError("INVALID_IR_SHAPES", f"{what} must be an integer >= 0, got {value!r}",
                        tensor=tensor, arena=arena)
    if value > U64_MAX:
        raise PlanError("ALLOCATION_OVERFLOW", f"{what} = {value} does not fit in 64 bits",
                        tensor=tensor, arena=arena)
    return value
