"""TEMPORARY stand-in for the canonical CBOR encoder and the plan hashes.

The real ones (``cbor.py``, ``plan.plan_hash``, ``plan.hashes``) are being
built on another branch. Until they land, shapes.py reaches hashes only
through this module; at merge its imports switch to the real implementation
and this file is deleted. Where a plan already carries the real hashes they
are used, so the switch changes no caller.
"""

from __future__ import annotations

import hashlib
import json


def canonical_cbor(obj) -> bytes:
    """Canonical CBOR bytes of ``obj`` (cbor2's canonical mode)."""
    import cbor2  # not needed at import time: the reference imports shapes.py

    return cbor2.dumps(obj, canonical=True)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def plan_hash(plan) -> str:
    """The plan's hash: ``plan.plan_hash`` when it exists, else SHA-256 over
    the canonical CBOR of the exported plan document."""
    real = getattr(plan, "plan_hash", None)
    if real:
        return real
    return sha256_hex(canonical_cbor(json.loads(plan.to_json())))


def arena_config_hash(plan) -> str:
    """The hash of the arena configuration a plan was made with (names,
    alignment, capacity, page size, persistence; never the sizes)."""
    real = getattr(plan, "hashes", None)
    if real and real.get("arena_config_hash"):
        return real["arena_config_hash"]
    arenas = plan.to_dict()["arenas"]
    config = [[name, entry["alignment"], entry.get("capacity_bytes"), entry["page_size"],
               entry["persistent"]] for name, entry in sorted(arenas.items())]
    return sha256_hex(canonical_cbor(config))
