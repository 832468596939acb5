"""Allocation traces (docs/determinism.md §6): a plan as a list of records, one
``allocation_header``, one ``tensor`` record per tensor in tensor-id order and
one ``summary``; written as JSON Lines or as canonical CBOR.

Standard library only, and built from the ``emel.plan/1`` document alone, so
the trace of a core plan and of a reference plan come from the same code and
any difference between them is a difference between the plans.
"""

from __future__ import annotations

import gzip
import zlib
import json

from . import cbor

TRACE_FORMAT = "emel.trace/1"
RECORD_KINDS = ("allocation_header", "tensor", "summary")
_FIRST = {"record": 0, "id": 1, "ir_hash": 2, "mode": 3}


def trace_records(plan: dict) -> list[dict]:
    """The records of a plan document (``Plan.to_dict()`` or ``reference.plan()``)."""
    hashes = plan["hashes"]
    header = {
        "record": "allocation_header",
        "format": TRACE_FORMAT,
        "graph": plan["graph"],
        "mode": plan["mode"],
        "strategy": plan["strategy"],
        "steps": plan["steps"],
        "ir_hash": hashes["ir_hash"],
        "execution_order_hash": hashes["execution_order_hash"],
        "arena_config_hash": hashes["arena_config_hash"],
        "shard_spec_hash": hashes["shard_spec_hash"],
        "replay_token_prefix": plan["replay_token"][:16],   # first 8 bytes, hex
        "rank": plan["rank"],
        "world_size": plan["world_size"],
        "arenas": {name: {"alignment": a["alignment"], "capacity_bytes": a.get("capacity_bytes"),
                          "page_size": a["page_size"], "persistent": a["persistent"]}
                   for name, a in sorted(plan["arenas"].items())},
    }
    records = [header]
    for tid, t in sorted(plan["tensors"].items()):
        records.append({"record": "tensor", "id": tid, "arena": t["arena"], "offset": t["offset"],
                        "size": t["size"], "slot": t.get("slot"), "birth": t.get("birth"),
                        "death": t.get("death"), "view_of": t.get("view_of"),
                        "inplace_of": t.get("inplace_of")})
    metrics = plan["metrics"]
    records.append({
        "record": "summary",
        "plan_hash": hashes["plan_hash"],
        "tensors": len(plan["tensors"]),
        "arena_sizes": {name: a["size"] for name, a in sorted(plan["arenas"].items())},
        "total_bytes": metrics["total_bytes"],
        "total_lower_bound": metrics["total_lower_bound"],
    })
    return records


def to_jsonl(records: list[dict]) -> str:
    """One compact JSON object per line, keys sorted, ``\\n`` after each."""
    return "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records)


def to_cbor(records: list[dict]) -> bytes:
    """The records as one canonical CBOR array."""
    return cbor.dumps(records)


def encode(records: list[dict], name: str) -> bytes:
    """The bytes of a trace file called ``name``: ``.cbor`` is CBOR, anything
    else JSON Lines; a further ``.gz`` gzips them (reproducibly: no time stamp,
    no file name)."""
    gz = name.endswith(".gz")
    base = name[:-3] if gz else name
    data = to_cbor(records) if base.endswith(".cbor") else to_jsonl(records).encode("utf-8")
    return gzip.compress(data, compresslevel=9, mtime=0) if gz else data


def parse(data: bytes) -> list[dict]:
    """Records from JSON Lines or CBOR bytes, gzipped or not (JSON Lines when
    it starts with ``{``, else CBOR). Bytes that are not a trace raise
    ValueError (cbor.CBORError is one)."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:  # truncated or corrupt
            raise ValueError(f"not a readable gzip stream: {e}") from None
    if data[:1] == b"{":
        try:
            records = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
        except RecursionError:
            raise ValueError("JSON nested too deeply to be a trace record") from None
        if not all(isinstance(r, dict) for r in records):
            raise ValueError("every line of a JSON Lines trace must be an object")
        return records
    records = cbor.loads(data)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise cbor.CBORError("a CBOR trace is an array of maps")
    return records


def first_difference(expected: list[dict], actual: list[dict]) -> str | None:
    """A readable description of the first record and field where two traces
    differ, or None when they are identical."""
    for i, (e, a) in enumerate(zip(expected, actual)):
        if e == a:
            continue
        what = f"record {i + 1} ({e.get('record')}{' ' + repr(e['id']) if 'id' in e else ''})"
        # What identifies the record (and, in the header, the graph) first.
        for key in sorted(set(e) | set(a), key=lambda k: (k not in _FIRST, _FIRST.get(k, 0), k)):
            if e.get(key, "<missing>") != a.get(key, "<missing>"):
                return (f"{what}, field {key!r}: expected {e.get(key, '<missing>')!r}, "
                        f"got {a.get(key, '<missing>')!r}")
    if len(expected) != len(actual):
        return f"expected {len(expected)} records, got {len(actual)}"
    return None
