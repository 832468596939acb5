"""Structure-aware mutation: JSON-like values, bytes, and the seeds of every
surface. Pure Python, driven by one ``random.Random`` so a campaign is a
function of its seed.

atheris cannot see coverage inside the gcc-built core, so instead of
coverage feedback the mutators know the formats: they change one field of a
valid document to a boundary value, a wrong type, a lone surrogate, an id
from elsewhere in the document, or drop / duplicate / reorder entries.
"""

from __future__ import annotations

import copy
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import graphgen  # noqa: E402  (valid random graphs, from the property tests)

SURROGATE = json.loads('"\\ud800"')
#: Integers where conversions break: sign, 8/16/31/32/53/63/64-bit edges.
BOUNDARY_INTS = (0, 1, -1, 2, 3, 7, 255, 256, 258, -255, 2**15, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
                 2**40, 2**52, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**65, -2**63)
ODD_VALUES = (None, True, False, 0.5, 4.9, -0.0, float("nan"), float("inf"), "", "x", SURROGATE,
              "\x00", "é", [], {}, [1], {"sym": "N", "max": 4})


def odd_value(rng: random.Random):
    """One of ODD_VALUES, copied: the containers among them must never be
    shared between documents (a later in-place edit would change the pool,
    so a seed would stop reproducing its input, and could make a document
    contain itself)."""
    return copy.deepcopy(rng.choice(ODD_VALUES))


def rand_int(rng: random.Random) -> int:
    if rng.random() < 0.7:
        return rng.choice(BOUNDARY_INTS)
    return rng.randrange(-2**65, 2**65)


def _paths(value, prefix=()):
    """Every (path, value) inside a JSON-like value, depth first."""
    yield prefix, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _strings(value) -> list:
    return [v for _, v in _paths(value) if isinstance(v, str)]


def replacement(rng: random.Random, old, doc) -> object:
    """A value to put where ``old`` was: same kind at an edge, or anything else."""
    r = rng.random()
    if isinstance(old, bool) or r < 0.15:
        return odd_value(rng)
    if isinstance(old, int) and r < 0.75:
        return rand_int(rng)
    if isinstance(old, str) and r < 0.75:
        pool = _strings(doc)
        return rng.choice([SURROGATE, "", old + old, old + "\udfff", "t" * 300, old.upper(),
                           rng.choice(pool) if pool else "z"])
    if isinstance(old, list) and old and r < 0.75:
        return [replacement(rng, rng.choice(old), doc) for _ in range(rng.randint(0, 3))]
    return rng.choice((rand_int(rng), odd_value(rng)))


def mutate_value(rng: random.Random, doc, rounds: int | None = None):
    """A copy of the JSON-like ``doc`` with 1..4 structure-aware edits."""
    doc = copy.deepcopy(doc)
    for _ in range(rounds or rng.randint(1, 4)):
        paths = list(_paths(doc))
        path, value = rng.choice(paths)
        op = rng.random()
        if isinstance(value, dict) and op < 0.3:
            if value and rng.random() < 0.5:
                del value[rng.choice(list(value))]
            else:
                value[rng.choice(list(value) or ["x"]) + rng.choice(["", "_x"])] = odd_value(rng)
            continue
        if isinstance(value, list) and value and op < 0.4:
            i = rng.randrange(len(value))
            kind = rng.randrange(4)
            if kind == 0:
                del value[i]
            elif kind == 1:
                value.insert(rng.randrange(len(value) + 1), copy.deepcopy(value[i]))
            elif kind == 2:
                j = rng.randrange(len(value))
                value[i], value[j] = value[j], value[i]
            else:
                value.reverse()
            continue
        if not path:
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = replacement(rng, value, doc)
    return doc


def substitute_bytes(rng: random.Random, data: bytes, most: int) -> bytes:
    """1 to ``most`` bytes replaced by random ones, length kept: a damaged model file whose
    structure mostly still parses (the seeded .pte and ONNX tests)."""
    b = bytearray(data)
    for _ in range(rng.randint(1, most)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """Byte-level edits: flips, truncation, insertion, duplication."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not b:
            b.extend(rng.randbytes(rng.randint(1, 8)))
            continue
        i = rng.randrange(len(b))
        kind = rng.randrange(5)
        if kind == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            del b[i:]
        elif kind == 2:
            b[i:i] = rng.randbytes(rng.randint(1, 4))
        elif kind == 3:
            b[i] = rng.choice((0, 0xFF, 0x7F, 0x80, 0x1B, 0xC0))
        else:
            j = rng.randrange(i, len(b) + 1)
            b[i:i] = b[i:j]
    return bytes(b)


# ------------------------------------------------------------------ seeds

def seed_graph(rng: random.Random, max_nodes: int = 12) -> dict:
    """A valid random emel.graph/1 document (the property tests' generator)."""
    return graphgen._Builder(graphgen._Rand(rng.getrandbits(32)), rng.randint(1, max_nodes)).build()


def seed_intervals(rng: random.Random, n: int | None = None) -> tuple[list, list, list]:
    n = rng.randint(0, 12) if n is None else n
    lower = [rng.randint(0, 10) for _ in range(n)]
    upper = [lo + rng.randint(0, 5) for lo in lower]
    size = [rng.choice((0, 1, 3, 8, 64, 100, 4096)) for _ in range(n)]
    return lower, upper, size


def seed_ggml(rng: random.Random) -> list[dict]:
    """A ggml graph as plain rows: name, nbytes, op, src (indices of earlier
    rows), view_src, view_offs, flags, layout."""
    ops = ("NONE", "ADD", "MUL", "SOFT_MAX", "SCALE", "MUL_MAT", "CPY", "VIEW", "OP")
    rows = []
    for i in range(rng.randint(1, 12)):
        row = {"name": f"x{i}", "nbytes": rng.choice((0, 4, 8, 24, 32, 100, 4107)),
               "op": "NONE" if i == 0 else rng.choice(ops), "src": [], "view_src": None,
               "view_offs": 0, "flags": rng.choice((0, 0, 1, 2, 4)), "layout": None}
        if i and row["op"] != "NONE":
            row["src"] = [rng.randrange(i) for _ in range(rng.randint(1, 3))]
        roots = [j for j in range(i) if rows[j]["view_src"] is None]
        if roots and rng.random() < 0.15:
            row["view_src"] = rng.choice(roots)
            row["view_offs"] = rng.choice((0, 4, 8))
        rows.append(row)
    return rows
