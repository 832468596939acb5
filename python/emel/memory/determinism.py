"""The determinism contract's hashed structures (docs/determinism.md), in plain
Python (standard library only).

Shared by the reference (which builds its plan hash from its own plan
document with these functions), the checkpoint reader (which re-derives a
checkpoint's plan hash from its contents) and anyone holding a plan document:
:func:`plan_hash_of_document` needs nothing but ``Plan.to_json()``. The C++
core computes the same bytes independently (``src/emel/memory/determinism/plan_hash.cpp``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from . import cbor
from .errors import PlanError, U64_MAX, is_int, is_text

PLAN_HASH_TAG = "tmmu_plan_v1"
IR_TAG = "emel_ir_v1"
EXECUTION_ORDER_TAG = "emel_execution_order_v1"
ARENA_CONFIG_TAG = "emel_arena_config_v1"
HASH_KEYS = ("ir_hash", "execution_order_hash", "arena_config_hash", "shard_spec_hash", "plan_hash")


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()



def check_determinism_args(replay_token=None, rank=0, world_size=1, shard_spec=None):
    """Check plan()'s determinism arguments, in this order: replay_token,
    world_size, rank, shard_spec (keys in id order). Returns
    ``(token bytes or None, rank, world_size, {tensor id: axis})``."""
    if replay_token is not None:
        if not isinstance(replay_token, (bytes, bytearray, memoryview)):
            raise PlanError("INVALID_IR_SHAPES", f"replay_token must be 32 bytes or None, "
                                                 f"got {type(replay_token).__name__}")
        replay_token = bytes(replay_token)
        if len(replay_token) != 32:
            raise PlanError("INVALID_IR_SHAPES",
                            f"replay_token must be exactly 32 bytes, got {len(replay_token)}")
    if not is_int(world_size) or world_size < 1:
        raise PlanError("INVALID_IR_SHAPES", f"world_size must be an integer >= 1, got {world_size!r}")
    if world_size > U64_MAX:
        raise PlanError("ALLOCATION_OVERFLOW", f"world_size = {world_size} does not fit in 64 bits")
    if not is_int(rank) or not 0 <= rank < world_size:
        raise PlanError("INVALID_IR_SHAPES",
                        f"rank must be an integer in [0, world_size) = [0, {world_size}), got {rank!r}")
    spec = {}
    if shard_spec is not None:
        if not isinstance(shard_spec, Mapping):
            raise PlanError("INVALID_IR_SHAPES",
                            f"shard_spec must map tensor ids to axes, got {shard_spec!r}")
        for tid in shard_spec:
            if not is_text(tid) or not tid:
                raise PlanError("INVALID_IR_SHAPES", f"shard_spec keys must be tensor ids (UTF-8 strings), "
                                                     f"got {tid!r}")
        for tid in sorted(shard_spec):
            axis = shard_spec[tid]
            if not is_int(axis) or axis < 0:
                raise PlanError("INVALID_IR_SHAPES",
                                f"shard_spec[{tid!r}] must be an axis (integer >= 0), got {axis!r}",
                                tensor=tid)
            if axis > U64_MAX:
                raise PlanError("ALLOCATION_OVERFLOW",
                                f"shard_spec[{tid!r}] = {axis} does not fit in 64 bits", tensor=tid)
            spec[tid] = axis
    return replay_token, rank, world_size, spec


def shard_spec_hash(spec: Mapping) -> bytes:
    """SHA-256(CBOR({tensor id: axis})); ``{}`` when there is no spec."""
    return sha256(cbor.dumps(dict(spec)))


def execution_order_hash(node_ids) -> bytes:
    """SHA-256(CBOR(["emel_execution_order_v1", [node id per step]]))."""
    return sha256(cbor.dumps([EXECUTION_ORDER_TAG, list(node_ids)]))


def default_replay_token(ir_hash: bytes, mode: str) -> bytes:
    """SHA-256(CBOR([ir_hash, mode])): the token when the caller gives none."""
    return sha256(cbor.dumps([ir_hash, mode]))


def arena_config_hash(arenas: Mapping) -> bytes:
    """Over the plan's arenas (the ``arenas`` block of a plan document):
    SHA-256(CBOR(["emel_arena_config_v1", {name: {alignment, capacity_bytes,
    page_size, persistent}}]))."""
    return sha256(cbor.dumps([ARENA_CONFIG_TAG, {
        name: {"alignment": a["alignment"], "capacity_bytes": a.get("capacity_bytes"),
               "page_size": a["page_size"], "persistent": a["persistent"]}
        for name, a in arenas.items()}]))


def slot_assignment_table(tensors: Mapping, replay_token: bytes) -> list:
    """[replay_token, rows]; a row per storage tensor, in id order:
    [id, arena, slot or null, birth, death, inplace_of or null]."""
    return [replay_token, [
        [tid, t["arena"], t.get("slot"), t["birth"], t["death"], t.get("inplace_of")]
        for tid, t in sorted(tensors.items()) if "view_of" not in t]]


def logical_address_table(arenas: Mapping, tensors: Mapping) -> list:
    """[[[arena, size] in name order], rows]; a row per tensor, in id order:
    [id, arena, offset, size, root storage tensor (views) or null]."""
    return [[[name, arenas[name]["size"]] for name in sorted(arenas)],
            [[tid, t["arena"], t["offset"], t["size"], t.get("view_of")]
             for tid, t in sorted(tensors.items())]]


def plan_hash(ir_hash: bytes, mode: str, arena_config: bytes, execution_order: bytes, rank: int,
              world_size: int, shard_spec: bytes, slot_table: list, address_table: list) -> bytes:
    """tmmu_plan_hash = SHA-256(CBOR(["tmmu_plan_v1", [ir_hash, mode,
    arena_config_hash, execution_order_hash, rank, world_size,
    shard_spec_hash, slot_assignment_table, logical_address_table]]))."""
    return sha256(cbor.dumps([PLAN_HASH_TAG, [ir_hash, mode, arena_config, execution_order, rank,
                                              world_size, shard_spec, slot_table, address_table]]))


def plan_hash_of_document(plan: Mapping) -> str:
    """The plan hash (hex) recomputed from an ``emel.plan/1`` document alone:
    its tables, its arenas and the input hashes it records."""
    h = plan["hashes"]
    return plan_hash(
        bytes.fromhex(h["ir_hash"]), plan["mode"], arena_config_hash(plan["arenas"]),
        bytes.fromhex(h["execution_order_hash"]), plan["rank"], plan["world_size"],
        bytes.fromhex(h["shard_spec_hash"]),
        slot_assignment_table(plan["tensors"], bytes.fromhex(plan["replay_token"])),
        logical_address_table(plan["arenas"], plan["tensors"])).hex()
