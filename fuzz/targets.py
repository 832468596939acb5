"""One target per public surface: ``generate(rng)`` makes an input (plain
data, picklable, saved as the reproducer) and ``run(case)`` feeds it to the
API and judges the answer:

- ``"accepted"``: the call succeeded and the oracle agrees with the result;
- ``"refused"``: the documented error (``PlanError`` naming a code; exit 2
  for ``emel-trace``; a known status from the C API);
- ``"known"``: an input of a class already filed elsewhere (skipped, see KNOWN);
- raises :class:`Wrong` for an accepted answer that breaks the oracle.

Any other exception escaping ``run`` is a stray exception type; a signal or
a time-out is caught by the driver (run.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import gzip
import importlib.util
import io
import json
import os
import random
import sys
import tempfile

import numpy as np

import emel.memory as mm
from emel.memory import cbor, fit, native, reference, trace, trace_cli, vocabulary
from emel.memory import ggml as gg
from emel.memory.determinism import sha256
from emel.memory.pooling import PoolingAllocator
from emel.memory.reorder import LiveBytes, reorder

from mutate import (mutate_bytes, mutate_value, rand_int, seed_ggml, seed_graph, seed_intervals,
                    odd_value)

# From the core's strategy table: every strategy, and those the reference
# implements bit for bit (the fuzzer compares them with it).
STRATEGIES = vocabulary.STRATEGIES
DETERMINISTIC = vocabulary.REFERENCE_STRATEGIES

#: Input classes filed elsewhere: the driver counts them as "known", not as bugs.
KNOWN: dict = {}


class Wrong(AssertionError):
    """An accepted answer that breaks its oracle."""


def _mutate_fields(rng, case: dict, rounds: int) -> dict:
    """mutate_value on a case's fields; a field it deletes gets its old value
    back (the harness needs every field; the API gets the odd values)."""
    out = mutate_value(rng, case, rounds)
    for key, value in case.items():
        out.setdefault(key, value)
    return out


def _small_budget(rng):
    return rng.choice((0, 1, 5, 20))


# ------------------------------------------------------------------ graphs

def gen_graph(rng):
    doc = seed_graph(rng)
    if rng.random() < 0.85:
        doc = mutate_value(rng, doc)
    return {"doc": doc, "mode": rng.choice(mm.MODES), "strategy": rng.choice(STRATEGIES),
            "budget": _small_budget(rng), "via": rng.choice(("dict", "json")),
            "reference": rng.random() < 0.25}


def run_graph(case):
    doc, strategy = case["doc"], case["strategy"]
    kw = dict(mode=case["mode"], strategy=strategy)
    source = doc
    if case["via"] == "json":
        try:
            source = json.dumps(doc)
        except (ValueError, TypeError):  # NaN is fine in JSON text; a surrogate pair is not
            source = doc
    try:
        plan = mm.plan(source, time_budget_ms=case["budget"], **kw)
    except mm.PlanError as e:
        if case["reference"] and strategy in DETERMINISTIC:
            _reference_refuses(doc, kw, e.code)
        return "refused"
    plan.verify()  # the self-check again, from the Python side
    if case["reference"] and strategy in DETERMINISTIC:
        expected = reference.plan(doc, **kw)
        if expected != plan.to_dict():
            raise Wrong("the core's plan differs from the reference's")
    return "accepted"


def _reference_refuses(doc, kw, code):
    try:
        reference.plan(doc, **kw)
    except mm.PlanError as e:
        if e.code != code:
            raise Wrong(f"core refuses with {code}, the reference with {e.code}") from None
        return
    raise Wrong(f"core refuses with {code}, the reference plans it")


# ------------------------------------------------------------------ from_arrays

def gen_arrays(rng):
    n = rng.randint(1, 8)
    sizes = [rng.choice((0, 1, 8, 64)) for _ in range(n)]
    nodes = rng.randint(0, 5)
    ins = [0]
    outs = [0]
    in_idx, out_idx = [], []
    for _ in range(nodes):
        in_idx += [rng.randrange(max(n, 1)) for _ in range(rng.randint(0, 2))]
        out_idx += [rng.randrange(max(n, 1)) for _ in range(rng.randint(0, 1))]
        ins.append(len(in_idx))
        outs.append(len(out_idx))
    case = {"sizes": sizes, "in": [ins, in_idx], "out": [outs, out_idx],
            "roles": None, "can_inplace": None, "view_of": None, "outputs": None}
    if rng.random() < 0.5:
        case["roles"] = [rng.randrange(6) for _ in range(n)]
    if rng.random() < 0.3:
        case["view_of"] = [-1] * n
    if rng.random() < 0.8:
        case = _mutate_fields(rng, case, rng.randint(1, 3))
    case["dtypes"] = {k: rng.choice((None, "uint64", "int64", "float64", "uint8", "int8", "bool"))
                      for k in ("sizes", "roles", "view_of")}
    case["strategy"] = rng.choice(STRATEGIES)
    return case


def run_arrays(case):
    def arr(key, value):
        dtype = case["dtypes"].get(key)
        if dtype is None or not isinstance(value, list):
            return value
        try:
            return np.array(value, dtype=dtype)
        except (ValueError, TypeError, OverflowError):
            return value

    pair = lambda v: tuple(v) if isinstance(v, list) else v  # noqa: E731
    try:
        g = mm.Graph.from_arrays(arr("sizes", case.get("sizes")), pair(case.get("in")), pair(case.get("out")),
                                 roles=arr("roles", case.get("roles")), can_inplace=case.get("can_inplace"),
                                 view_of=arr("view_of", case.get("view_of")), outputs=case.get("outputs"))
        plan = mm.plan(g, strategy=case["strategy"], time_budget_ms=5)
    except mm.PlanError:
        return "refused"
    except TypeError as e:  # the signature's own arity (a pair that is not a pair)
        if "from_arrays" in str(e):
            return "refused"
        raise
    # The document path must agree: the arrays graph is exactly its document.
    doc = g.to_dict()
    again = mm.plan(doc, strategy=case["strategy"], time_budget_ms=5)
    if again.to_dict() != plan.to_dict():
        raise Wrong("Graph.from_arrays and its document plan differently")
    return "accepted"


# ------------------------------------------------------------------ place()

def gen_place(rng):
    lower, upper, size = seed_intervals(rng)
    case = {"lower": lower, "upper": upper, "size": size, "strategy": rng.choice(STRATEGIES),
            "alignment": rng.choice((1, 8, 64, 3, 0, 2**63)), "fit": rng.choice(("best", "first")),
            "capacity": rng.choice((None, None, 0, 100, 2**64 - 1)), "budget": _small_budget(rng)}
    if rng.random() < 0.8:
        case = _mutate_fields(rng, case, rng.randint(1, 2))
    case["as_numpy"] = rng.choice((None, "uint64", "int64", "float64", "int32"))
    if rng.random() < 0.1:  # the issue-11 class, so the triage is exercised
        case["upper"] = list(case["lower"]) if isinstance(case["lower"], list) else case["upper"]
    return case



def run_place(case):
    args = []
    for key in ("lower", "upper", "size"):
        v = case[key]
        if case["as_numpy"] and isinstance(v, list):
            try:
                v = np.array(v, dtype=case["as_numpy"])
            except (ValueError, TypeError, OverflowError):
                pass
        args.append(v)
    try:
        p = mm.place(*args, strategy=case["strategy"], alignment=case["alignment"], fit=case["fit"],
                     time_budget_ms=case["budget"], capacity=case["capacity"])
    except mm.PlanError:
        return "refused"
    except ValueError as e:  # documented for the arguments' shape, strategy, fit and capacity
        if "PlanError" in type(e).__name__:
            raise
        return "refused"
    _check_placement(np.asarray(args[0], dtype=object), np.asarray(args[1], dtype=object),
                     np.asarray(args[2], dtype=object), p, case["alignment"])
    return "accepted"


def _check_placement(lower, upper, size, p, alignment):
    lo, hi, sz = (list(map(int, a)) for a in (lower, upper, size))
    off = list(map(int, p.offsets))
    a = alignment

    def up(x):
        return -(-x // a) * a

    for i in range(len(off)):
        if lo[i] == hi[i]:  # never live: holds no bytes, offset 0 (docs/strategies.md §6)
            if off[i] != 0:
                raise Wrong(f"row {i}: never live but offset {off[i]}")
            continue
        if off[i] % a or off[i] + up(sz[i]) > p.size:
            raise Wrong(f"row {i}: offset {off[i]} misaligned or past the size {p.size}")
        for j in range(i):
            live = max(lo[i], lo[j]) < min(hi[i], hi[j])
            if live and sz[i] and sz[j] and off[i] < off[j] + up(sz[j]) and off[j] < off[i] + up(sz[i]):
                raise Wrong(f"rows {j} and {i} overlap while both live")


# ------------------------------------------------------------------ buffer CSVs

def gen_csv(rng):
    lower, upper, size = seed_intervals(rng, rng.randint(0, 10))
    rows = [["id", "lower", "upper", "size"]] + [[f"b{i}", str(lo), str(hi), str(s)]
                                                 for i, (lo, hi, s) in enumerate(zip(lower, upper, size))]
    rows = mutate_value(rng, rows, rng.randint(0, 3))
    text = "\n".join(",".join(str(c) for c in (r if isinstance(r, list) else [r])) for r in rows) + "\n"
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.3:
        data = mutate_bytes(rng, data)
    return {"data": data, "strategy": rng.choice(DETERMINISTIC)}


def run_csv(case):
    with tempfile.NamedTemporaryFile(suffix=".csv", delete=False) as f:
        f.write(case["data"])
    try:
        ids, lower, upper, size = mm.read_buffers_csv(f.name)
        p = mm.place(lower, upper, size, strategy=case["strategy"])
    except mm.PlanError:
        return "refused"
    finally:
        os.unlink(f.name)
    _check_placement(lower, upper, size, p, 1)
    if len(ids) != len(lower):
        raise Wrong("one id per row expected")
    return "accepted"


# ------------------------------------------------------------------ checkpoints

def _seed_plan(rng):
    doc = seed_graph(rng, 8)
    try:
        return doc, mm.plan(doc, strategy=rng.choice(DETERMINISTIC))
    except mm.PlanError:
        g = mm.Graph()
        g.tensor("a", [4])
        return g.to_dict(), mm.plan(g)


def gen_checkpoint(rng):
    doc, plan = _seed_plan(rng)
    data = plan.checkpoint()
    kind = rng.random()
    if kind < 0.4:
        data = mutate_bytes(rng, data)
    elif kind < 0.9:  # re-signed: a structurally changed body with a valid digest
        body = cbor.loads(data)
        del body["digest"]
        body = mutate_value(rng, body, rng.randint(1, 3))
        if isinstance(body, dict):
            try:
                body["digest"] = sha256(cbor.dumps(body))
            except (cbor.CBORError, TypeError, ValueError):
                pass
        try:
            data = cbor.dumps(body)
        except (cbor.CBORError, TypeError, ValueError):
            data = mutate_bytes(rng, data)
    graph = mutate_value(rng, doc, 1) if rng.random() < 0.2 else doc
    return {"data": data, "graph": graph, "original": plan.to_dict()}


def run_checkpoint(case):
    try:
        restored = mm.restore(case["data"], case["graph"])
    except mm.PlanError:  # CheckpointError is one
        return "refused"
    if restored.to_dict() != case["original"] and case["graph"] == case.get("graph"):
        # accepted: it must be the plan of this graph, identical to a fresh one
        fresh = mm.restore(restored.checkpoint(), case["graph"])
        if fresh.to_dict() != restored.to_dict():
            raise Wrong("restore accepted a checkpoint that does not replan identically")
    return "accepted"


# ------------------------------------------------------------------ traces

def gen_trace(rng):
    doc, plan = _seed_plan(rng)
    records = trace.trace_records(plan.to_dict())
    name = rng.choice(("t.jsonl", "t.jsonl.gz", "t.cbor", "t.cbor.gz"))
    if rng.random() < 0.6:
        records = mutate_value(rng, records, rng.randint(1, 3))
    try:
        data = trace.encode(records, name)
    except (cbor.CBORError, TypeError, ValueError):
        data = trace.encode(trace.trace_records(plan.to_dict()), name)
    if rng.random() < 0.35:
        data = mutate_bytes(rng, data)
    return {"graph": doc, "name": name, "data": data,
            "original": trace.trace_records(plan.to_dict())}


def run_trace(case):
    with tempfile.TemporaryDirectory() as tmp:
        graph = os.path.join(tmp, "g.json")
        with open(graph, "w") as f:
            json.dump(case["graph"], f)
        path = os.path.join(tmp, case["name"])
        with open(path, "wb") as f:
            f.write(case["data"])
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = trace_cli.main(["verify", graph, path])
    if rc not in (0, 1, 2):
        raise Wrong(f"emel-trace verify exited {rc}")
    if rc == 0:
        try:
            same = trace.parse(case["data"]) == case["original"]
        except ValueError:
            same = False
        if not same:
            raise Wrong("emel-trace verify accepted a trace that differs from the recorded one")
    return "accepted" if rc in (0, 1) else "refused"


# ------------------------------------------------------------------ ggml

def gen_ggml(rng):
    rows = seed_ggml(rng)
    if rng.random() < 0.3:  # a cycle, or a layout tag shared across sizes
        i, j = rng.randrange(len(rows)), rng.randrange(len(rows))
        if rng.random() < 0.5:
            rows[i]["src"] = list(rows[i]["src"]) + [j]
        else:
            rows[i]["layout"] = rows[j]["layout"] = "L"
    if rng.random() < 0.4:
        rows = mutate_value(rng, rows, rng.randint(1, 3))
    bt = {"alignment": rng.choice((1, 16, 32, 32, 32, 64, 3, 0, -1, 2**64)),
          "max_size": rng.choice((16, 32, 64, 2**64 - 1, 2**64 - 1, 2**64 - 1, -1))}
    if rng.random() < 0.2:
        bt = _mutate_fields(rng, bt, 1)
    return {"rows": rows, "bt": bt, "strategy": rng.choice(("ggml",) + STRATEGIES),
            "api": rng.choice(("reserve", "reserve_n_size", "alloc_graph", "tallocr", "ctx")),
            "n_buffers": rng.choice((1, 1, 2)), "buffer_id": rng.choice((0, 1, -1, 2**40))}


def _ggml_tensors(rows):
    """Tensor objects from rows; a row that cannot be one is kept as raw data
    (the API must refuse it)."""
    if not isinstance(rows, list):
        return rows
    ts = []
    for r in rows:
        if not isinstance(r, dict):
            ts.append(r)
            continue
        t = gg.Tensor(r.get("name"), r.get("nbytes"), op=r.get("op"), view_offs=r.get("view_offs"),
                      flags=r.get("flags"), layout=r.get("layout"))
        ts.append(t)
    for t, r in zip(ts, rows):
        if not isinstance(r, dict) or not isinstance(t, gg.Tensor):
            continue
        src = r.get("src")
        t.src = [ts[k] if type(k) is int and 0 <= k < len(ts) else k for k in src] if isinstance(src, list) else src
        v = r.get("view_src")
        t.view_src = ts[v] if type(v) is int and 0 <= v < len(ts) else v
    return ts


def run_ggml(case):
    bt_fields = case["bt"] if isinstance(case["bt"], dict) else {}
    try:
        bt = gg.BufferType(alignment=bt_fields.get("alignment"), max_size=bt_fields.get("max_size"))
        ts = _ggml_tensors(case["rows"])
        api = case["api"]
        if api == "tallocr":
            a = gg.TensorAllocator(4096, bt)
            for t in ts:
                a.alloc(t)
            return "accepted"
        if api == "ctx":
            gg.alloc_ctx_tensors(ts, bt)
            return "accepted"
        graph = gg.Graph(nodes=[t for t in ts if getattr(t, "op", None) != "NONE"],
                         leafs=[t for t in ts if getattr(t, "op", None) == "NONE"])
        ga = gg.GraphAllocator([bt] * case["n_buffers"], strategy=case["strategy"], time_budget_ms=5)
        if api == "alloc_graph":
            ga.alloc_graph(graph)
        else:
            getattr(ga, api)(graph)
        ga.get_buffer_size(case["buffer_id"])
    except mm.PlanError:
        return "refused"
    _check_ggml(ga, graph)
    return "accepted"


def _check_ggml(ga, graph):
    # Per tensor (the core's rows of the last plan), not by name: tensors may share a name,
    # and ga.addresses / ga.inplace_of keep one of them, not necessarily the one by_name would.
    tensors = ga._to_core(graph)[1]
    addresses, inplace_of = ga._core.addresses, ga._core.inplace_of
    align = ga.buffer_types[0].alignment

    def up(x):
        return -(-x // align) * align

    for t, p in zip(tensors, inplace_of):
        if p >= 0 and up(t.nbytes) > up(tensors[p].nbytes):
            raise Wrong(f"{t.name!r} ({t.nbytes} B) placed in place of {tensors[p].name!r} "
                        f"({tensors[p].nbytes} B)")
    for t, (buffer_id, chunk, offset) in zip(tensors, addresses):
        if buffer_id < 0:
            continue
        # ids sharing one buffer: its chunks are reported under the first of them
        first = ga._allocator_of.index(ga._allocator_of[buffer_id])
        sizes = ga.get_chunk_sizes(first)
        if chunk < len(sizes) and offset + up(t.nbytes) > sizes[chunk]:
            raise Wrong(f"{t.name!r} ends past its chunk ({offset} + {t.nbytes} > {sizes[chunk]})")


# ------------------------------------------------------------------ arenas and pools

def gen_arenas(rng):
    doc = seed_graph(rng, 8)
    if rng.random() < 0.3:
        doc = mutate_value(rng, doc, 1)
    return {"doc": doc, "strategy": rng.choice(DETERMINISTIC), "zero": rng.random() < 0.5,
            "sizes": [rand_int(rng) if rng.random() < 0.3 else rng.choice((0, 1, 64, 4096))
                      for _ in range(rng.randint(1, 6))] + [odd_value(rng)] * (rng.random() < 0.2),
            "policy": rng.choice(("exact", "best_fit"))}


def run_arenas(case):
    outcome = "accepted"
    try:
        plan = mm.plan(case["doc"], strategy=case["strategy"])
        first = mm.Arenas(plan, zero=case["zero"])
        for tid in plan.tensor_ids:
            first.array(tid)
        if first.nbytes <= 2**26:  # hashing the data reads every byte: keep it quick
            h1 = first.commit(include_data=True).state_hash
            del first
            second = mm.Arenas(plan, zero=case["zero"])
            if second.commit(include_data=True).state_hash != h1:
                raise Wrong("two fresh Arenas of one plan hash differently")
    except mm.PlanError:
        outcome = "refused"
    pool = PoolingAllocator(case["policy"])
    live = []
    for n in case["sizes"]:
        try:
            live.append(pool.allocate(n))
        except mm.PlanError:
            outcome = "refused"
    for address in live:
        pool.free(address)
    return outcome


# ------------------------------------------------------------------ peak and reorder

def gen_peak(rng):
    doc = seed_graph(rng)
    if rng.random() < 0.3:
        doc = mutate_value(rng, doc, 1)
    return {"doc": doc, "mode": rng.choice(mm.MODES), "strategy": rng.choice(STRATEGIES),
            "reorder": rng.random() < 0.3}


def run_peak(case):
    """peak() and LiveBytes against the plan: every arena's peak is its lower
    bound (so never above its size), and so is the bound reorder scores."""
    mode = case["mode"]
    try:
        plan = mm.plan(case["doc"], mode=mode, strategy=case["strategy"], time_budget_ms=5)
        graph = plan.graph
        if case["reorder"]:
            graph = reorder(graph, mode, time_budget_ms=1)
            plan = mm.plan(graph, mode=mode, strategy=case["strategy"], time_budget_ms=5)
    except mm.PlanError:
        return "refused"
    bounds = {a.name: a.lower_bound for a in plan.arenas.values()}
    for a in plan.arenas.values():
        live = plan.peak(arena=a.name).live_bytes
        if live != a.lower_bound or live > a.size:
            raise Wrong(f"peak(arena={a.name!r}) = {live}, lower bound {a.lower_bound}, size {a.size}")
    if plan.peak().live_bytes > plan.total_bytes:
        raise Wrong(f"peak() = {plan.peak().live_bytes} above total_bytes {plan.total_bytes}")
    # tmmu may form fewer in-place pairs (a must_not_alias partner among the
    # victim slot's earlier holders): its bound may be higher, never lower.
    got = LiveBytes(graph, mode, plan.options["role_arenas"]).bounds()   # the arenas as planned
    if got != bounds and (case["strategy"] != "tmmu" or any(got[a] > bounds[a] for a in got)):
        raise Wrong(f"live_bytes_bound {got} is not the plan's lower bound {bounds}")
    return "accepted"


# ------------------------------------------------------------------ budgets as text

_UNIT_BYTES = {"": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "kb": 10**3, "GB": 10**9}


def gen_budget(rng):
    """A budget as text with the bytes it means (None: text it must refuse)."""
    value = rng.choice((rand_int(rng), 2**53 + rng.randint(-3, 300), rng.randint(0, 10**6),
                        int("9" * rng.randint(20, 400))))
    value = abs(value) if type(value) is int else 1
    unit = rng.choice(list(_UNIT_BYTES))
    scale = _UNIT_BYTES[unit]
    if rng.random() < 0.3 and scale > 1:  # a decimal: whole bytes, rounded down
        whole, frac = divmod(value, 1000)
        text, expected = f"{whole}.{frac:03d}{rng.choice(('', ' '))}{unit}", (value * scale) // 1000
    else:
        text, expected = f"{value}{rng.choice(('', ' '))}{unit}", value * scale
    if rng.random() < 0.15:  # anything: refused or read, never another error
        text, expected = mutate_value(rng, text, 1), None
    elif rng.random() < 0.2:  # text that is no budget
        text, expected = rng.choice(_NOT_BUDGETS), "refused"
    return {"text": text, "expected": expected, "via": rng.choice(("parse", "max_fit"))}


_NOT_BUDGETS = ("1e5", "-1", "1.5.5", "", " ", "NaN", "inf", "0x10", "\u0661\u0662", "1" * 5000,
                "5 XB", "\ud800", "1_000", ".5", "1,000", "+1", "1 2", "KiB", "1e999")


def _bytes_graph(n):
    return {"format": "emel.graph/1", "tensors": [
        {"id": "y", "shape": [n], "dtype": "uint8", "role": "output"},
        {"id": "x", "shape": [1], "dtype": "uint8", "role": "input"}],
        "nodes": [{"id": "make", "op": "expand", "inputs": ["x"], "outputs": ["y"]}]}


def run_budget(case):
    """Budgets are parsed exactly (no float on the way): max_fit's answer
    needs at most the budget, its next value more."""
    text, expected = case["text"], case["expected"]
    try:
        budget = fit.parse_bytes(text)
    except ValueError:  # the documented error (OverflowError is not one)
        if type(expected) is int:
            raise Wrong(f"parse_bytes refused {text!r:.100} ({expected} bytes)") from None
        return "refused"
    if expected == "refused":
        raise Wrong(f"parse_bytes read {text!r:.100} as {budget} bytes")
    if expected is not None and budget != expected:
        raise Wrong(f"parse_bytes({text!r}) = {budget}, not {expected}")
    if case["via"] == "max_fit" and budget >= 1:
        n = min(budget, 2**62)  # every value tried plans (sizes below 2^64)
        answer = fit.max_fit(_bytes_graph, text, "n", lo=max(n - 4, 1), hi=n + 4, alignment=1)
        str(answer)
        if answer.bytes is not None and answer.bytes > budget:
            raise Wrong(f"max_fit({text!r}) answered a plan of {answer.bytes} B")
        if answer.next_bytes is not None and answer.next_bytes <= budget:
            raise Wrong(f"max_fit({text!r}) stopped below a value that fits")
    return "accepted"


# ------------------------------------------------------------------ the command lines

_CLI_INPUTS = ("graph",) * 7 + ("/dev/zero", "/dev/null", "fifo", "dir", "missing", "deep")
_CLI_OUTPUTS = ("ok", "ok", "ok", "-", None, None, None, "missing_dir", "dir", "/dev/full")


def gen_cli(rng):
    return {"tool": rng.choice(("plan", "fit", "trace_record", "trace_verify", "sweep", "import")),
            "input": rng.choice(_CLI_INPUTS), "output": rng.choice(_CLI_OUTPUTS),
            "shard_spec": rng.choice((None,) * 9 + ("deep", "fifo", "/dev/zero", '{"w": 0}')),
            "doc": seed_graph(rng, 6)}


def run_cli(case):
    """The command lines on hostile input files and output paths: an exit
    status they document, one line on stderr, no traceback (a stray
    exception), and no hang on a device or a pipe (the driver's time-out)."""
    from emel.memory import cli, fit as fit_cli, import_cli, sweep
    with tempfile.TemporaryDirectory() as tmp:
        graph = os.path.join(tmp, "g.json")
        with open(graph, "w") as f:
            json.dump(case["doc"], f)
        fifo = os.path.join(tmp, "fifo")
        os.mkfifo(fifo)
        deep = os.path.join(tmp, "deep.json")
        with open(deep, "w") as f:
            f.write("[" * 100_000 + "]" * 100_000)
        paths = {"graph": graph, "fifo": fifo, "dir": tmp, "missing": os.path.join(tmp, "nope.json"),
                 "deep": deep, "ok": os.path.join(tmp, "out.json"),
                 "missing_dir": os.path.join(tmp, "no", "out.json")}
        src = paths.get(case["input"], case["input"])
        out = paths.get(case["output"], case["output"])
        tool = case["tool"]
        if tool == "plan":
            main, argv, codes = cli.main, [src] + (["--json", out] if out else []), (0, 1, 2)
        elif tool == "fit":
            main, argv, codes = fit_cli.main, [src, "--budget", "1MiB", "--dim", "b"] + (
                ["--json", out] if out else []), (0, 1, 2)
        elif tool == "trace_record":
            main, argv, codes = trace_cli.main, ["record", src, "-o", out or "-"], (0, 2)
        elif tool == "trace_verify":
            main, argv, codes = trace_cli.main, ["verify", graph, src], (0, 1, 2)
        elif tool == "sweep":
            main, argv, codes = sweep.main, [tmp, "-j", "1", "--no-progress", "--strategies", "tmmu"] + (
                ["-o", out] if out else []), (0, 1, 2)
        else:
            main, argv, codes = import_cli.main, [src] + (["-o", out] if out else []), (0, 1, 2)
        spec = case["shard_spec"]
        if spec is not None and tool in ("plan", "trace_record"):
            argv += ["--shard-spec", paths.get(spec, spec)]
        buf = io.StringIO()
        here = os.getcwd()
        os.chdir(tmp)  # a tool that takes '-' as a file name writes it here
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                rc = main(argv)
        except SystemExit as e:  # argparse: a bad argument
            rc = e.code
        finally:
            os.chdir(here)
    if rc not in codes:
        raise Wrong(f"{tool} exited {rc}: {buf.getvalue()[-300:]}")
    text = buf.getvalue()
    if "Traceback" in text:
        raise Wrong(f"{tool} printed a traceback: {text[-300:]}")
    return "accepted" if rc == 0 else "refused"


# ------------------------------------------------------------------ the C API

_LIB = None


def _lib():
    global _LIB
    if _LIB is None:
        path = os.environ.get("EMEL_C_LIBRARY")
        if not path:
            try:
                path = native.library_path()
            except (FileNotFoundError, OSError):
                here = os.path.dirname(os.path.abspath(__file__))
                path = os.path.join(os.path.dirname(here), "build", "libemel_memory_c.so")
        _LIB = ctypes.CDLL(path)
    return _LIB


def gen_capi(rng):
    """A call sequence: graph building with odd ids and sizes, planning with
    odd options, queries with odd indices; from_arrays; place; ggml."""
    n = rng.randint(0, 6)
    ids = [rng.choice((f"t{i}".encode(), b"", b"\xff\xfe", "é".encode(), b"t0", None)) if rng.random() < 0.15
           else f"t{i}".encode() for i in range(n)]
    calls = []
    for i in range(n):
        calls.append(("tensor", ids[i], rand_int(rng) % 2**64 if rng.random() < 0.3 else rng.choice((0, 8, 64)),
                      _enum(rng, 6), rng.choice((0, 0, 1, 3, 64, 2**63)),
                      rng.randint(0, 1), rng.choice(ids) if ids and rng.random() < 0.15 else None,
                      rng.choice((0, 4, 2**64 - 1))))
    for j in range(rng.randint(0, 4)):
        calls.append(("node", f"n{j}".encode() if rng.random() < 0.95 else b"",
                      [rng.choice(ids) for _ in range(rng.randint(0, 2))] if ids else [],
                      [rng.choice(ids) for _ in range(rng.randint(0, 2))] if ids else []))
    if rng.random() < 0.3 and n:
        calls.append(("phase", f"n{rng.randint(0, 3)}".encode(), _enum(rng, 3)))
    calls.append(("plan", _enum(rng, 3), _enum(rng, 5), _enum(rng, 2),
                  rng.choice((0, 1, 3, 128, 2**63)), rng.choice((0, 1, 5))))
    calls.append(("query", rng.choice((0, 1, 5, 2**64 - 1)), rng.choice(ids + [b"zz"]) if ids else b"zz",
                  _enum(rng, 5)))
    lower, upper, size = seed_intervals(rng, rng.randint(0, 6))
    calls.append(("place", lower, upper, [s if rng.random() < 0.8 else rand_int(rng) % 2**64 for s in size],
                  _enum(rng, 5), rng.choice((1, 8, 0, 3)), rng.choice((0, 1, 5)), _enum(rng, 2)))
    starts = sorted(rng.randint(0, 3) for _ in range(3))
    calls.append(("arrays", rng.choice((starts, [0, 2, 0], [1, 1, 1])), rng.random() < 0.5,
                  [rng.randint(0, 3) for _ in range(4)],
                  [rng.choice((-1,) * 12 + (0, 1, 3, 4, -2, -7, -2**63, 2**63 - 1)) for _ in range(4)]))
    calls.append(("ggml", seed_ggml(rng), rng.choice((1, 32, 0, 3)), rng.choice(("ggml", "tmmu", "auto", "bogus")),
                  rng.choice((0, 7)) if rng.random() < 0.2 else None,
                  _enum(rng, 3) if rng.random() < 0.3 else None))
    return {"calls": calls}


_STATUSES = range(0, 10)
#: Values for C enum arguments: in range, just outside, and the int extremes
#: (read as the enum type before the range check, -1 was undefined behaviour).
_ODD_ENUM_CODES = (5, 6, 7, 9, 99, -1, -2, -2**31, 2**31 - 1)


def _enum(rng, valid: int) -> int:
    """A code for a C enum of ``valid`` values: mostly one of them."""
    return rng.randrange(valid) if rng.random() < 0.95 else rng.choice(_ODD_ENUM_CODES)


def _status(s):
    if s not in _STATUSES:
        raise Wrong(f"unknown status {s}")
    return s


def run_capi(case):
    lib = _lib()
    P, S, U64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64
    refused = False
    g, plan = P(), P()
    _status(lib.emel_graph_create(b"fuzz", ctypes.byref(g)))
    try:
        for call in case["calls"]:
            kind, args = call[0], call[1:]
            if kind == "tensor":
                tid, nbytes, role, align, inplace, base, off = args
                s = lib.emel_graph_add_tensor(g, tid, U64(nbytes), ctypes.c_int(role), U64(align),
                                              ctypes.c_int(inplace), base, U64(off))
            elif kind == "node":
                nid, ins, outs = args
                arr_in = (ctypes.c_char_p * max(len(ins), 1))(*ins)
                arr_out = (ctypes.c_char_p * max(len(outs), 1))(*outs)
                s = lib.emel_graph_add_node(g, nid, arr_in, S(len(ins)), arr_out, S(len(outs)))
            elif kind == "phase":
                nid, phase = args
                s = lib.emel_graph_set_node_phase(g, nid, ctypes.c_int(phase))
            elif kind == "plan":
                mode, strategy, fit, align, budget = args
                opts = (ctypes.c_uint8 * 512)()
                _status(lib.emel_plan_options_default(opts))
                # mode, strategy, fit are the first three ints; then two u64s
                ints = ctypes.cast(opts, ctypes.POINTER(ctypes.c_int32))
                ints[0], ints[1], ints[2] = mode, strategy, fit
                u64s = ctypes.cast(ctypes.addressof(opts) + 16, ctypes.POINTER(ctypes.c_uint64))
                u64s[0], u64s[1] = budget, align
                s = lib.emel_plan_create(g, opts, ctypes.byref(plan))
            elif kind == "query":
                index, tid, hash_kind = args
                if plan.value:
                    digest = ctypes.create_string_buffer(65)
                    for fn in ("emel_plan_hash", "emel_plan_hash_hex"):
                        extra = (S(65),) if fn.endswith("hex") else ()
                        hs = _status(getattr(lib, fn)(plan, ctypes.c_int(hash_kind), digest, *extra))
                        if (hs == 0) != (0 <= hash_kind <= 4):
                            raise Wrong(f"{fn} with kind {hash_kind} returned {hs}")
                    out64, outs = U64(), S()
                    for fn in ("emel_plan_arena_size", "emel_plan_tensor_offset", "emel_plan_tensor_size"):
                        _status(getattr(lib, fn)(plan, S(index), ctypes.byref(out64)))
                    _status(lib.emel_plan_tensor_index(plan, tid, ctypes.byref(outs)))
                    _status(lib.emel_plan_num_tensors(plan, None))
                s = 0
            elif kind == "place":
                lower, upper, size, strategy, align, budget, fit_code = args
                k = len(lower)
                arr = lambda v: (ctypes.c_uint64 * max(k, 1))(*v)  # noqa: E731
                out = (ctypes.c_uint64 * max(k, 1))()
                s = lib.emel_place_ex(arr(lower), arr(upper), arr(size), S(k), ctypes.c_int(strategy),
                                      ctypes.c_int(fit_code), U64(align), U64(budget), U64(0), out, None)
                if s == 0 and not (0 <= strategy <= 4 and fit_code in (0, 1)):
                    raise Wrong(f"emel_place_ex accepted strategy {strategy}, fit {fit_code}")
            elif kind == "arrays":
                starts, null_index, index, view_base = args
                s = _c_from_arrays(lib, starts, null_index, index, view_base)
                if s == 0 and any(b < -1 or b >= 4 for b in view_base):
                    raise Wrong(f"emel_graph_from_arrays accepted view_base {view_base}")
            else:
                s = _c_ggml(lib, *args)
            refused |= _status(s) != 0
    finally:
        if plan.value:
            lib.emel_plan_destroy(plan)
        lib.emel_graph_destroy(g)
    return "refused" if refused else "accepted"


class _Arrays(ctypes.Structure):
    U = ctypes.POINTER(ctypes.c_uint64)
    _fields_ = [("num_tensors", ctypes.c_size_t), ("num_nodes", ctypes.c_size_t), ("size", U),
                ("in_start", U), ("in_index", U), ("out_start", U), ("out_index", U),
                ("role", ctypes.POINTER(ctypes.c_uint8)), ("can_inplace", ctypes.POINTER(ctypes.c_uint8)),
                ("alignment", U), ("view_base", ctypes.POINTER(ctypes.c_int64)), ("view_offset", U),
                ("outputs", U), ("num_outputs", ctypes.c_size_t)]


def _c_from_arrays(lib, starts, null_index, index, view_base):
    u = lambda v: (ctypes.c_uint64 * max(len(v), 1))(*v)  # noqa: E731
    # index arrays hold exactly as many entries as the last offset says (the contract)
    a = _Arrays(num_tensors=4, num_nodes=len(starts) - 1, size=u([8, 8, 8, 8]), in_start=u(starts),
                in_index=None if null_index else u(index[:starts[-1]] + [0] * starts[-1]),
                out_start=u([0] * len(starts)), view_base=(ctypes.c_int64 * 4)(*view_base))
    g = ctypes.c_void_p()
    s = lib.emel_graph_from_arrays(ctypes.byref(a), b"arrays", ctypes.byref(g))
    if g.value:
        lib.emel_graph_destroy(g)
    return s


def _c_ggml(lib, rows, alignment, strategy, layout, op_code):
    P, S = ctypes.c_void_p, ctypes.c_size_t
    no = ctypes.c_size_t(-1).value
    g, bt, ga = P(), P(), P()
    _status(lib.emel_ggml_graph_create(ctypes.byref(g)))
    worst = 0
    try:
        for r in rows:
            op = 0 if r["op"] == "NONE" else 2 if r["op"] in gg.INPLACE_OPS else 1
            op = op if op_code is None else op_code
            srcs = (ctypes.c_size_t * max(len(r["src"]), 1))(*r["src"])
            v = no if r["view_src"] is None else r["view_src"]
            worst = max(worst, _status(lib.emel_ggml_graph_add_tensor(
                g, r["name"].encode(), ctypes.c_uint64(r["nbytes"]), ctypes.c_int(op),
                ctypes.c_uint32(r["flags"]), srcs, S(len(r["src"])), S(v), ctypes.c_uint64(r["view_offs"]), None)))
            if layout is not None:
                lib.emel_ggml_graph_set_layout(g, S(len(rows) - 1), ctypes.c_uint64(layout))
        _status(lib.emel_ggml_graph_build_forward_expand(g, S(len(rows) - 1)))
        if _status(lib.emel_ggml_buffer_type_create(ctypes.c_uint64(alignment), ctypes.c_uint64(2**64 - 1),
                                                    ctypes.byref(bt))) == 0:
            types = (ctypes.c_void_p * 1)(bt)
            if _status(lib.emel_ggml_gallocr_create(types, S(1), strategy.encode(), ctypes.c_uint64(5),
                                                    ctypes.byref(ga))) == 0:
                worst = max(worst, _status(lib.emel_ggml_gallocr_reserve(ga, g)))
            else:
                worst = 7
        else:
            worst = 5
    finally:
        if ga.value:
            lib.emel_ggml_gallocr_destroy(ga)
        if bt.value:
            lib.emel_ggml_buffer_type_destroy(bt)
        lib.emel_ggml_graph_destroy(g)
    return worst


# ------------------------------------------------------------------ GGUF models

#: One tiny model per architecture the reader models (bench/tiny_gguf.py), written once
#: per process; inputs edit the bytes of their header (metadata and tensor table).
_GGUF_MODELS = ("llama-gqa", "qwen2", "qwen3", "gemma", "phi3", "llama-q8_0")
_GGUF_HEADER = 12_000
_GGUF_BYTES: dict = {}


def _gguf_model(name: str) -> bytes:
    if name not in _GGUF_BYTES:
        bench = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
        if bench not in sys.path:
            sys.path.append(bench)  # bench/tiny_gguf.py, next to fuzz/ in a checkout
        from tiny_gguf import TINY_MODELS, write_tiny_gguf
        with tempfile.TemporaryDirectory() as tmp:
            _GGUF_BYTES[name] = write_tiny_gguf(os.path.join(tmp, "m.gguf"), **TINY_MODELS[name]).read_bytes()
    return _GGUF_BYTES[name]


def gen_gguf(rng):
    name = rng.choice(_GGUF_MODELS)
    head = _gguf_model(name)[:_GGUF_HEADER]
    return {"model": name, "head": mutate_bytes(rng, head) if rng.random() < 0.9 else head,
            "n_ctx": rng.choice((1, 64, 256, 4096)), "n_ubatch": rng.choice((1, 7, 512)),
            "n_seq": rng.choice((1, 3)), "flash_attn": rng.choice((True, False))}


def run_gguf(case):
    """A model file with an edited header (metadata, tensor table): planned, or
    refused with a PlanError naming the file; never another exception."""
    data = case["head"] + _gguf_model(case["model"])[_GGUF_HEADER:]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.gguf")
        with open(path, "wb") as f:
            f.write(data)
        try:
            r = mm.from_gguf(path, n_ctx=case["n_ctx"], n_ubatch=case["n_ubatch"], n_seq=case["n_seq"],
                             flash_attn=case["flash_attn"])
        except mm.PlanError as e:
            if "m.gguf" not in str(e):
                raise Wrong(f"a refusal that does not name the file: {e}") from None
            return "refused"
    if not (r.kv_bytes > 0 and r.compute_bytes > 0 and r.model_bytes > 0):
        raise Wrong(f"accepted with {r.kv_bytes=} {r.compute_bytes=} {r.model_bytes=}")
    return "accepted"


# ------------------------------------------------------------------ ONNX models

_ONNX_BYTES: list = []


def _onnx_model() -> bytes:
    """A small model with views, broadcasts, a reshape to a computed shape and a
    symbolic batch (fixed through input_shapes), serialized once per process."""
    if not _ONNX_BYTES:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        inits = [numpy_helper.from_array(np.zeros((16, 32), np.float32), "W1"),
                 numpy_helper.from_array(np.zeros((32,), np.float32), "b1"),
                 numpy_helper.from_array(np.array([-1, 2, 16], np.int64), "shape"),
                 numpy_helper.from_array(np.zeros((32, 16), np.float32), "W2")]
        nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="fc1"),
                 helper.make_node("Add", ["h", "b1"], ["hb"], name="bias"),
                 helper.make_node("Relu", ["hb"], ["r"], name="relu"),
                 helper.make_node("Reshape", ["r", "shape"], ["r3"], name="reshape"),
                 helper.make_node("Transpose", ["r3"], ["t"], name="transpose", perm=[0, 2, 1]),
                 helper.make_node("Flatten", ["t"], ["r2"], name="flatten", axis=1),
                 helper.make_node("MatMul", ["r2", "W2"], ["y0"], name="fc2"),
                 helper.make_node("Softmax", ["y0"], ["y"], name="softmax", axis=-1)]
        graph = helper.make_graph(nodes, "fuzz_mlp",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        _ONNX_BYTES.append(model.SerializeToString())
    return _ONNX_BYTES[0]


def gen_onnx(rng):
    data = _onnx_model()
    return {"bytes": mutate_bytes(rng, data) if rng.random() < 0.9 else data,
            "batch": rng.choice((1, 4, 0, 2**40)), "mode": rng.choice(("inference", "forward"))}


def run_onnx(case):
    """ONNX model bytes with random edits: a graph whose plan passes its self-check,
    or a PlanError; never protobuf's or the importer's own exception types."""
    try:
        graph = mm.from_onnx(case["bytes"], input_shapes={"x": [case["batch"], 16]})
        plan = mm.plan(graph, mode=case["mode"])
    except mm.PlanError:
        return "refused"
    plan.verify()
    return "accepted"


# ------------------------------------------------------------------ the table

SURFACES = {
    "graph": (gen_graph, run_graph),
    "arrays": (gen_arrays, run_arrays),
    "place": (gen_place, run_place),
    "csv": (gen_csv, run_csv),
    "checkpoint": (gen_checkpoint, run_checkpoint),
    "trace": (gen_trace, run_trace),
    "ggml": (gen_ggml, run_ggml),
    "arenas": (gen_arenas, run_arenas),
    "capi": (gen_capi, run_capi),
    "peak": (gen_peak, run_peak),
    "budget": (gen_budget, run_budget),
    "cli": (gen_cli, run_cli),
}
# ONNX models need the optional `onnx` package (emel[onnx]); without it the surface is left out.
if importlib.util.find_spec("onnx") is not None:
    SURFACES["onnx"] = (gen_onnx, run_onnx)
# GGUF files need the optional `gguf` package (emel[gguf]); without it the surface is left out.
if importlib.util.find_spec("gguf") is not None:
    SURFACES["gguf"] = (gen_gguf, run_gguf)


def generate(surface: str, seed: int):
    """The input number ``seed`` of ``surface`` (a pure function of both)."""
    return SURFACES[surface][0](random.Random(f"{surface}:{seed}"))
