"""Checkpoint and restore (docs/determinism.md §7).

``Plan.checkpoint()`` writes one canonical CBOR map::

    {"format": "emel.checkpoint/1",
     "options": {...},          # how the plan was asked for
     "plan": {...},             # the emel.plan/1 document, hashes included
     "plan_hash": h'32 bytes',
     "digest": h'32 bytes'}     # SHA-256 of the CBOR of the map without "digest"

``restore(data, graph)`` checks the bytes (strict canonical CBOR, the exact
layout, the digest), re-derives the plan hash from the plan document alone,
checks the graph is the one planned (its ir_hash), plans it again with the
recorded options and accepts only the identical plan. Every refusal is a
:class:`CheckpointError` (a ``PlanError``) whose ``reason`` says which check
failed.
"""

from __future__ import annotations

from . import _core, cbor
from .determinism import HASH_KEYS, plan_hash_of_document, sha256
from .errors import PlanError, is_int
from .graph import load_graph
from .plan_data import register_plan_method
from .planning import graph_to_plan, plan as make_plan

CHECKPOINT_FORMAT = "emel.checkpoint/1"
_KEYS = ("digest", "format", "options", "plan", "plan_hash")
_OPTION_KEYS = ("alignment", "arena_layout", "arenas", "fit", "mode", "order", "role_arenas", "shard_spec",
                "strategy", "time_budget_ms")
#: What checkpoints written before the layout and the order were recorded hold: they
#: restore as they were planned when made with the defaults of both.
_EARLIER_OPTION_KEYS = tuple(k for k in _OPTION_KEYS if k not in ("arena_layout", "order"))
#: Why a checkpoint was refused.
REASONS = ("corrupt", "tampered", "other_graph", "plan_differs")


class CheckpointError(PlanError):
    """A checkpoint that cannot be trusted or does not belong to the graph.

    ``reason``: ``corrupt`` (not a checkpoint: undecodable, truncated, wrong
    layout), ``tampered`` (its digest or plan hash does not match its
    contents), ``other_graph`` (planned from a different graph) or
    ``plan_differs`` (planning the graph again gives another plan).
    """

    def __init__(self, reason: str, message: str):
        super().__init__("INVALID_IR_SHAPES", f"checkpoint refused ({reason}): {message}")
        self.reason = reason  # kept by pickling: PlanError.__reduce__ restores every attribute


def checkpoint_bytes(plan_document: dict, options: dict) -> bytes:
    body = {"format": CHECKPOINT_FORMAT, "options": options, "plan": plan_document,
            "plan_hash": bytes.fromhex(plan_document["hashes"]["plan_hash"])}
    body["digest"] = sha256(cbor.dumps(body))
    return cbor.dumps(body)


def read_checkpoint(data: bytes) -> dict:
    """Decode and check a checkpoint on its own (no graph): layout, digest and
    plan hash. Returns the decoded map."""
    try:
        doc = cbor.loads(data)
    except cbor.CBORError as e:
        raise CheckpointError("corrupt", f"not canonical CBOR: {e}") from None
    if not isinstance(doc, dict) or sorted(doc, key=str) != list(_KEYS):
        keys = sorted(doc, key=str) if isinstance(doc, dict) else type(doc).__name__
        raise CheckpointError("corrupt", f"expected a map with keys {', '.join(_KEYS)}; got {keys}")
    if doc["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError("corrupt", f"format is {doc['format']!r}, expected {CHECKPOINT_FORMAT!r}")
    for key in ("digest", "plan_hash"):  # a re-signed checkpoint may hold anything
        if not isinstance(doc[key], bytes) or len(doc[key]) != 32:
            raise CheckpointError("corrupt", f"{key} must be 32 bytes, got {doc[key]!r}")
    body = {k: v for k, v in doc.items() if k != "digest"}
    if doc["digest"] != sha256(cbor.dumps(body)):
        raise CheckpointError("tampered", "the digest does not match the contents")
    plan, options = doc["plan"], doc["options"]
    if not isinstance(options, dict) or sorted(options, key=str) not in (list(_OPTION_KEYS),
                                                                         list(_EARLIER_OPTION_KEYS)):
        raise CheckpointError("corrupt", f"options must have the keys {', '.join(_OPTION_KEYS)}")
    try:
        recomputed = plan_hash_of_document(plan)
        recorded = plan["hashes"]["plan_hash"]
        if not all(isinstance(plan["hashes"][k], str) for k in HASH_KEYS):
            raise TypeError("hashes must be hex strings")
    except (KeyError, TypeError, ValueError, AttributeError, cbor.CBORError) as e:
        raise CheckpointError("corrupt", f"the plan document is incomplete: {e!r}") from None
    if recomputed != recorded or bytes.fromhex(recorded) != doc["plan_hash"]:
        raise CheckpointError("tampered", f"the plan hash recomputed from the plan ({recomputed}) "
                                          f"does not match the recorded one ({doc['plan_hash'].hex()})")
    return doc


def restore(data: bytes, graph):
    """Rebuild the plan a checkpoint holds, for ``graph`` (a Graph or anything
    ``load_graph`` takes). Raises :class:`CheckpointError` when the checkpoint
    is corrupt or tampered with, or belongs to another graph."""
    doc = read_checkpoint(data)
    saved, options = doc["plan"], doc["options"]
    _check_restore_fields(saved, options)
    graph = load_graph(graph)
    try:  # a sharded plan's IR is its rank's share of the graph
        g = graph_to_plan(graph, saved["rank"], saved["world_size"], options.get("shard_spec") or {})
    except PlanError as e:  # the shard spec does not fit this graph
        raise CheckpointError("other_graph", f"the checkpoint was made from ir_hash "
                                             f"{saved['hashes']['ir_hash']}, and its shard spec "
                                             f"does not apply to this graph: {e}") from None
    ir = _core.ir_hash(g._core_input())  # a graph that fails validation raises its own PlanError
    if ir != saved["hashes"]["ir_hash"]:
        raise CheckpointError("other_graph", f"the graph's ir_hash is {ir}, the checkpoint was "
                                             f"made from {saved['hashes']['ir_hash']}")
    try:
        again = make_plan(graph, replay_token=bytes.fromhex(saved["replay_token"]),
                          rank=saved["rank"], world_size=saved["world_size"], **options)
    except (ValueError, TypeError) as e:  # PlanError is a ValueError
        raise CheckpointError("plan_differs", f"the graph does not plan with the checkpoint's "
                                              f"options: {e}") from None
    fresh = again.to_dict()
    # The graph's name is not part of its IR: a renamed graph restores.
    if {**fresh, "graph": None} != {**saved, "graph": None}:
        raise CheckpointError("plan_differs", f"planning the graph again gives plan hash "
                                              f"{again.plan_hash}; the checkpoint holds "
                                              f"{saved['hashes']['plan_hash']}")
    return again


def _check_restore_fields(saved, options) -> None:
    """The fields restore() reads beyond the plan hash, as a re-signed
    checkpoint could hold them: anything else is ``corrupt``."""
    token = saved.get("replay_token")
    if not isinstance(token, str) or len(token) % 2 or any(c not in "0123456789abcdef" for c in token):
        raise CheckpointError("corrupt", f"replay_token must be a lowercase hex string, got {token!r}")
    for key in ("rank", "world_size"):
        if not is_int(saved.get(key)) or saved[key] < 0:
            raise CheckpointError("corrupt", f"{key} must be an integer >= 0, got {saved.get(key)!r}")
    if options.get("shard_spec") is not None and not isinstance(options["shard_spec"], dict):
        raise CheckpointError("corrupt", f"shard_spec must be a map, got {options['shard_spec']!r}")


def plan_checkpoint(plan) -> bytes:
    """``plan.checkpoint()``: the plan's document and options as checkpoint bytes."""
    return checkpoint_bytes(plan.to_dict(), plan._options)


# Plan.checkpoint() (emel.memory.plan_data, a lower layer) calls plan_checkpoint through this slot.
register_plan_method("checkpoint", plan_checkpoint)
