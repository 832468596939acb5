"""Regressions of what fuzzing found on the public surfaces (issue 12), one test per
finding. Each input used to crash, hang, answer wrongly or raise a stray
exception type; each must now give the documented error naming the field."""

import ctypes
import gzip
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import emel
import emel.memory as mm
from emel.memory.vocabulary import STRATEGIES
from emel.memory import cbor, native, trace_cli
from emel.memory import ggml as gg
from emel.memory.checkpoint import CheckpointError
from emel.memory.determinism import sha256
from emel.memory.pooling import PoolingAllocator

SURROGATE = json.loads('"\\ud800"')  # a str that is not UTF-8 text
PACKAGE_ROOT = str(Path(emel.__file__).resolve().parents[1])
HERE = Path(__file__).resolve().parent


def _code(excinfo):
    return excinfo.value.code


# ---------------------------------------------------------------- crashes

def test_tensor_allocator_alignment_zero_is_refused_not_sigfpe():
    with pytest.raises(mm.PlanError) as e:
        gg.TensorAllocator(1024, gg.BufferType(alignment=0)).alloc(gg.Tensor("x", 10))
    assert _code(e) == "ALIGNMENT_VIOLATION" and "alignment" in str(e.value)


def test_from_arrays_decreasing_offsets_are_refused_before_reading():
    with pytest.raises(mm.PlanError) as e:
        mm.Graph.from_arrays(np.array([4, 4], np.uint64),
                             (np.array([0, 2, 0], np.uint64), np.zeros(0, np.uint64)),
                             (np.array([0, 1, 1], np.uint64), np.array([1], np.uint64)))
    # No stray bytes read past the index array: the message names the decrease.
    assert _code(e) == "INVALID_IR_SHAPES" and "decreases at node 1" in str(e.value)
    assert e.value.node == "n1"


def _c_library():
    build = os.environ.get("EMEL_C_API_BUILD_DIR")
    if build:
        return ctypes.CDLL(os.path.join(os.path.abspath(build), "libemel_memory_c.so"))
    local = HERE.parent / "build" / "libemel_memory_c.so"
    try:
        return ctypes.CDLL(native.library_path())
    except (FileNotFoundError, OSError):
        if local.is_file():
            return ctypes.CDLL(str(local))
        pytest.skip("no C API library (not an installed build, no build/ tree)")


class GraphArrays(ctypes.Structure):
    U64P = ctypes.POINTER(ctypes.c_uint64)
    _fields_ = [("num_tensors", ctypes.c_size_t), ("num_nodes", ctypes.c_size_t),
                ("size", U64P), ("in_start", U64P), ("in_index", U64P),
                ("out_start", U64P), ("out_index", U64P),
                ("role", ctypes.POINTER(ctypes.c_uint8)), ("can_inplace", ctypes.POINTER(ctypes.c_uint8)),
                ("alignment", U64P), ("view_base", ctypes.POINTER(ctypes.c_int64)),
                ("view_offset", U64P), ("outputs", U64P), ("num_outputs", ctypes.c_size_t)]


def test_c_graph_from_arrays_with_null_index_and_decreasing_offsets():
    lib = _c_library()
    u64 = lambda *v: (ctypes.c_uint64 * len(v))(*v)  # noqa: E731
    a = GraphArrays(num_tensors=2, num_nodes=2, size=u64(4, 4), in_start=u64(0, 2, 0),
                    out_start=u64(0, 1, 1), out_index=u64(1))
    out = ctypes.c_void_p()
    status = lib.emel_graph_from_arrays(ctypes.byref(a), None, ctypes.byref(out))
    assert status == 1 and not out.value  # EMEL_INVALID_IR_SHAPES, no graph


def _c_ggml_graph(lib, layout=False):
    """a (24 B, OTHER) -> b (4107 B, INPLACE) as in the issue; with `layout`,
    both get explicit layout 7."""
    g = ctypes.c_void_p()
    assert lib.emel_ggml_graph_create(ctypes.byref(g)) == 0
    no = ctypes.c_size_t(-1).value
    add = lib.emel_ggml_graph_add_tensor
    add.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint32,
                    ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64,
                    ctypes.POINTER(ctypes.c_size_t)]
    assert add(g, b"a", 24, 1, 0, None, 0, no, 0, None) == 0
    assert add(g, b"b", 4107, 2, 0, (ctypes.c_size_t * 1)(0), 1, no, 0, None) == 0
    lib.emel_ggml_graph_set_layout.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64]
    if layout:
        assert lib.emel_ggml_graph_set_layout(g, 0, 7) == 0
        assert lib.emel_ggml_graph_set_layout(g, 1, 7) == 0
    lib.emel_ggml_graph_build_forward_expand.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    assert lib.emel_ggml_graph_build_forward_expand(g, 1) == 0
    return g


def test_c_ggml_same_layout_different_sizes_is_refused():
    lib = _c_library()
    bt, ga = ctypes.c_void_p(), ctypes.c_void_p()
    lib.emel_ggml_buffer_type_create.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]
    assert lib.emel_ggml_buffer_type_create(32, 2**64 - 1, ctypes.byref(bt)) == 0
    types = (ctypes.c_void_p * 1)(bt)
    lib.emel_ggml_gallocr_create.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                             ctypes.c_uint64, ctypes.c_void_p]
    assert lib.emel_ggml_gallocr_create(types, 1, b"ggml", 0, ctypes.byref(ga)) == 0
    lib.emel_ggml_gallocr_reserve.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    assert lib.emel_ggml_gallocr_reserve(ga, _c_ggml_graph(lib)) == 0  # byte-size layouts differ
    assert lib.emel_ggml_gallocr_reserve(ga, _c_ggml_graph(lib, layout=True)) == 1


# ---------------------------------------------------------------- threads

def test_graph_allocator_shared_between_threads():
    """Threads reserve graphs of different sizes on one allocator; after each
    reserve a thread must read back exactly its own plan (the plan and the
    names given to it are one step: no other thread's addresses, no crash)."""
    def chain(tag, n):
        t = gg.Tensor(f"{tag}0", 64, flags=gg.INPUT)
        for i in range(1, n):
            t = gg.Tensor(f"{tag}{i}", 64 + 32 * (i % 3), op="MUL" if i % 2 else "ADD",
                          src=[t, gg.Tensor(f"{tag}w{i}", 32, flags=gg.INPUT)])
        return gg.build_forward([t])

    graphs = {tag: chain(tag, 150 * (k + 1)) for k, tag in enumerate("pqrs")}
    expected = {}
    for tag, g in graphs.items():
        alone = gg.GraphAllocator(gg.BufferType(alignment=16), strategy="greedy_by_size")
        expected[tag] = (alone.reserve_n_size(g), dict(alone.addresses), dict(alone.inplace_of))
    addresses = [e[1] for e in expected.values()]
    inplace = [e[2] for e in expected.values()]
    shared = gg.GraphAllocator(gg.BufferType(alignment=16), strategy="greedy_by_size")
    errors = []

    def work(tag):
        try:
            for _ in range(15):
                if shared.reserve_n_size(graphs[tag]) != expected[tag][0]:
                    errors.append(f"{tag}: sizes")
                # Another thread may have planned since; but what we read is
                # always one whole plan, never names of one with places of another.
                if shared.addresses not in addresses or shared.inplace_of not in inplace:
                    errors.append(f"{tag}: a torn plan")
        except Exception as e:  # a torn plan: another graph's indices
            errors.append(f"{tag}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(tag,)) for tag in graphs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


# ---------------------------------------------------------------- hangs, cycles

@pytest.mark.parametrize("strategy", ["ggml", "tmmu", "greedy_by_size", "auto"])
def test_ggml_two_node_cycle_is_liveness_cycle(strategy):
    a = gg.Tensor("a", 8, op="ADD")
    b = gg.Tensor("b", 8, op="ADD", src=[a])
    a.src = [b]
    ga = gg.GraphAllocator(gg.BufferType(), strategy=strategy)
    with pytest.raises(mm.PlanError) as e:
        ga.reserve(gg.Graph(nodes=[a, b]))
    assert _code(e) == "LIVENESS_CYCLE" and e.value.tensor in ("a", "b")


# ---------------------------------------------------------------- accepted but wrong

def test_ggml_same_layout_tag_with_different_sizes_is_refused():
    a = gg.Tensor("a", 24, op="OP", layout="L")
    b = gg.Tensor("b", 4107, op="SOFT_MAX", src=[a], layout="L")
    with pytest.raises(mm.PlanError) as e:
        gg.GraphAllocator(gg.BufferType()).reserve(gg.build_forward([b]))
    assert _code(e) == "INVALID_IR_SHAPES" and e.value.tensor == "b"


def test_new_arena_buffers_hold_no_stale_heap_bytes():
    """Buffers small enough for malloc to recycle: the data digest of a commit
    and buffer() must not see what an earlier owner wrote."""
    g = mm.Graph()
    g.tensor("x", [1000], dtype="uint8", role="input")
    g.tensor("y", [1], dtype="uint8")
    g.node("n", "op", ["x"], ["y"])
    plan = mm.plan(g, alignment=64)
    hashes, dirty = set(), 0
    for _ in range(10):
        a = mm.Arenas(plan, zero=False)
        for name in plan.arenas:
            buf = a.buffer(name)
            dirty += int(buf.any())
            buf[:] = 0xAB
        del a
        hashes.add(mm.Arenas(plan).commit(include_data=True).state_hash)
    assert dirty == 0 and len(hashes) == 1


@pytest.mark.parametrize("kwargs, field", [
    (dict(sizes=[4.9]), "sizes[0]"),
    (dict(roles=[258]), "roles[0]"),
    (dict(roles=[-255]), "roles[0]"),
    (dict(can_inplace=[256]), "can_inplace[0]"),
    (dict(view_of=[-1, 0.5]), "view_of[1]"),
    (dict(alignment=[-64]), "alignment[0]"),
])
def test_from_arrays_refuses_inexact_conversions(kwargs, field):
    sizes = kwargs.pop("sizes", [4, 4])
    with pytest.raises(mm.PlanError) as e:
        mm.Graph.from_arrays(sizes, ([0, 0], []), ([0, 1], [0]), **kwargs)
    assert _code(e) == "INVALID_IR_SHAPES" and field in str(e.value)
    assert e.value.tensor == "t" + field[field.index("[") + 1]


def test_from_arrays_keeps_exact_values():
    g = mm.Graph.from_arrays([4, 2**64 - 1], ([0, 0], []), ([0, 2], [0, 1]),
                             can_inplace=[True, 0], view_of=np.array([-1, -1]))
    assert g._arrays["size"].tolist() == [4, 2**64 - 1]
    assert mm.Graph.from_arrays([4.0], ([0, 0], []), ([0, 1], [0]))._arrays["size"].tolist() == [4]


# ---------------------------------------------------------------- stray exception types

def _tiny(name=""):
    g = mm.Graph(name=name)
    g.tensor("a", [4])
    return g


@pytest.mark.parametrize("make", [
    lambda: _tiny().tensor(SURROGATE, [4]),
    lambda: _tiny().tensor("b", [4], dtype=SURROGATE),
    lambda: _tiny().tensor("b", [4], arena=SURROGATE),
    lambda: mm.plan(_tiny(name=SURROGATE)),
    lambda: mm.plan(_tiny(), arenas={SURROGATE: {}}),
    lambda: mm.plan(_tiny(), role_arenas={"activation": SURROGATE}),
    lambda: mm.load_graph({"format": "emel.graph/1", "name": SURROGATE, "tensors": [], "nodes": []}),
    lambda: _tiny().node("n", "op", outputs=[SURROGATE]),
    lambda: gg.GraphAllocator(gg.BufferType()).reserve(gg.build_forward([gg.Tensor(SURROGATE, 8, op="OP")])),
], ids=["id", "dtype", "arena", "graph-name", "arenas", "role_arenas", "document-name", "node-output",
        "ggml-name"])
def test_lone_surrogates_are_plan_errors(make):
    with pytest.raises(mm.PlanError) as e:
        make()
    assert _code(e) == "INVALID_IR_SHAPES" and "UTF-8" in str(e.value) or "id strings" in str(e.value)


@pytest.mark.parametrize("field, value, code", [
    ("nbytes", -1, "INVALID_IR_SHAPES"),
    ("nbytes", 2**64, "ALLOCATION_OVERFLOW"),
    ("flags", 256, "INVALID_IR_SHAPES"),
    ("view_offs", -1, "INVALID_IR_SHAPES"),
])
def test_ggml_out_of_range_tensor_fields(field, value, code):
    t = gg.Tensor("x", 8, op="OP")
    setattr(t, field, value)
    with pytest.raises(mm.PlanError) as e:
        gg.GraphAllocator(gg.BufferType()).reserve(gg.build_forward([t]))
    assert _code(e) == code and field in str(e.value) and e.value.tensor == "x"


@pytest.mark.parametrize("alignment", [-1, 2**64, 0, 3])
def test_ggml_out_of_range_alignment(alignment):
    with pytest.raises(mm.PlanError) as e:
        gg.GraphAllocator(gg.BufferType(alignment=alignment))
    assert _code(e) == "ALIGNMENT_VIOLATION" and "alignment" in str(e.value)
    with pytest.raises(mm.PlanError):
        gg.TensorAllocator(64, gg.BufferType(alignment=alignment))


def test_ggml_get_buffer_size_out_of_range():
    with pytest.raises(mm.PlanError) as e:
        gg.GraphAllocator(gg.BufferType()).get_buffer_size(2**40)
    assert _code(e) == "INVALID_IR_SHAPES" and "buffer id" in str(e.value)


def _resigned(plan, **changes):
    body = cbor.loads(plan.checkpoint())
    del body["digest"]
    body.update(changes)
    body["digest"] = sha256(cbor.dumps(body))
    return cbor.dumps(body)


def test_restore_of_resigned_checkpoint_with_int_plan_hash():
    plan = mm.plan(_tiny())
    with pytest.raises(CheckpointError) as e:
        mm.restore(_resigned(plan, plan_hash=7), _tiny())
    assert e.value.reason == "corrupt" and "plan_hash" in str(e.value)


@pytest.fixture()
def recorded_trace(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(_tiny().to_json())
    out = tmp_path / "t.jsonl.gz"
    assert trace_cli.main(["record", str(graph), "-o", str(out)]) == 0
    return graph, out


def test_trace_verify_truncated_gzip_exits_2(recorded_trace, capsys):
    graph, out = recorded_trace
    out.write_bytes(out.read_bytes()[:-12])
    assert trace_cli.main(["verify", str(graph), str(out)]) == 2
    assert "gzip" in capsys.readouterr().err


def test_trace_verify_header_with_arenas_not_an_object_exits_2(recorded_trace, capsys):
    graph, out = recorded_trace
    records = [json.loads(line) for line in gzip.decompress(out.read_bytes()).splitlines()]
    records[0]["arenas"] = [1, 2]
    bad = out.with_name("bad.jsonl")
    bad.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert trace_cli.main(["verify", str(graph), str(bad)]) == 2
    assert "'arenas'" in capsys.readouterr().err


def test_trace_verify_exit_code_from_the_command_line(recorded_trace):
    graph, out = recorded_trace
    out.write_bytes(out.read_bytes()[:40])
    r = subprocess.run([sys.executable, "-m", "emel.memory.trace_cli", "verify", str(graph), str(out)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": PACKAGE_ROOT})
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_read_buffers_csv_non_utf8(tmp_path):
    p = tmp_path / "b.csv"
    p.write_bytes(b"id,lower,upper,size\n\xff,0,1,1\n")
    with pytest.raises(mm.PlanError) as e:
        mm.read_buffers_csv(p)
    assert _code(e) == "INVALID_IR_SHAPES" and "UTF-8" in str(e.value)


def test_read_buffers_csv_value_past_int64(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text(f"id,lower,upper,size\na,0,1,{2**63}\n")
    with pytest.raises(mm.PlanError) as e:
        mm.read_buffers_csv(p)
    assert _code(e) == "ALLOCATION_OVERFLOW" and e.value.tensor == "a" and "size" in str(e.value)


def test_place_takes_python_ints_up_to_2_64_minus_1():
    offsets, size = mm.place([0, 1], [1, 2], [1, 2**64 - 1])  # never live together
    assert offsets.tolist() == [0, 0] and size == 2**64 - 1
    with pytest.raises(mm.PlanError) as e:  # live together: the sum overflows, as documented
        mm.place([0, 0], [1, 1], [1, 2**64 - 1])
    assert _code(e) == "ALLOCATION_OVERFLOW"
    with pytest.raises(mm.PlanError) as e:
        mm.place([0, 1], [1, 2], [1, 2**64])
    assert _code(e) == "INVALID_IR_SHAPES" and "size[1]" in str(e.value)


def test_arenas_array_symbolic_and_huge_zero_size_shapes():
    g = mm.Graph()
    g.tensor("x", [0, 2**62], dtype="float32", role="input")
    g.tensor("s", [{"sym": "B", "max": 4}, 2], dtype="float32")
    g.tensor("y", [4], dtype="float32")
    g.node("n", "op", ["x"], ["s"])
    g.node("m", "op", ["s"], ["y"])
    arenas = mm.Arenas(mm.plan(g))
    assert arenas.array("s").shape == (4, 2)          # planned at the maximum
    x = arenas.array("x")                              # NumPy cannot hold (0, 2^62) float32
    assert x.shape == (0,) and x.dtype == np.uint8


@pytest.mark.parametrize("nbytes, code", [(2**63, "ALLOCATION_FAILED"), (-1, "INVALID_ARGUMENT"),
                                          (2**64, "INVALID_ARGUMENT"), (1.5, "INVALID_ARGUMENT")])
def test_pooling_allocator_bad_sizes(nbytes, code):
    with pytest.raises(mm.PlanError) as e:
        PoolingAllocator().allocate(nbytes)
    assert _code(e) == code and str(nbytes) in str(e.value)


_OOM = """
import resource, sys
import numpy as np
import emel.memory as mm
n = 10**6
sizes = np.full(n, 64, np.uint64)
ins = (np.arange(n, dtype=np.uint64), np.arange(n - 1, dtype=np.uint64))
outs = (np.arange(n, dtype=np.uint64), np.arange(1, n, dtype=np.uint64))
vm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
limit = vm + int(sys.argv[1]) * 2**20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    mm.plan(mm.Graph.from_arrays(sizes, ins, outs))
    print("planned")
except mm.PlanError as e:
    print(e.code, e.message)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or "asan" in os.environ.get("LD_PRELOAD", ""),
                    reason="needs Linux RLIMIT_AS (ASan reserves more address space than any limit)")
@pytest.mark.parametrize("headroom_mib", [20, 150])  # out of memory reading, then planning
def test_out_of_host_memory_is_allocation_failed(headroom_mib):
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", _OOM, str(headroom_mib)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("ALLOCATION_FAILED") and "1000000 tensors" in r.stdout


# ---------------------------------------------------------------- found by fuzz/run.py

def test_reference_refuses_lone_surrogates_like_the_core():
    from emel.memory import reference
    g = mm.Graph()
    g.tensor("a", [4])
    g.node("n", "op", outputs=["a"])
    doc = g.to_dict()
    doc["nodes"][0]["op"] = SURROGATE
    for planner in (mm.plan, reference.plan):
        with pytest.raises(mm.PlanError) as e:
            planner(doc)
        assert _code(e) == "INVALID_IR_SHAPES" and "'op'" in str(e.value).replace("op must", "'op' must")


def test_place_refuses_none_for_an_array():
    with pytest.raises(ValueError) as e:
        mm.place([], None, [])
    assert "upper" in str(e.value)


def test_from_arrays_ragged_roles():
    with pytest.raises(mm.PlanError) as e:
        mm.Graph.from_arrays([4, 4], ([0, 0], []), ([0, 2], [0, 1]), roles=[3, []])
    assert _code(e) == "INVALID_IR_SHAPES" and "roles" in str(e.value)


# ------------------------------------ huge rows, never-live rows, bad enum codes (issue 31)

def test_auto_places_where_only_tmmu_overflows():
    """Issue 31: no two huge rows live together, so offsets fit in 2^64 - 1,
    but tmmu's slots (two of 2^64 - 2^40) do not: its pass in auto's portfolio
    made auto fail with ALLOCATION_OVERFLOW though every other strategy places."""
    huge = 2**64 - 2**40
    rows = ([0, 0, 1, 2], [1, 2, 3, 3], [huge, 16, 16, huge])
    with pytest.raises(mm.PlanError) as e:
        mm.place(*rows, strategy="tmmu")
    assert _code(e) == "ALLOCATION_OVERFLOW" and e.value.tensor == "1"
    sizes = {s: mm.place(*rows, strategy=s).size for s in ("greedy_by_size", "best_fit", "optimal")}
    placed = mm.place(*rows, strategy="auto")
    assert placed.size == min(sizes.values()) == huge + 16 and placed.optimal
    for s in ("auto", "optimal"):  # aimed at a capacity too
        assert mm.place(*rows, strategy=s, capacity=huge + 16).size == huge + 16


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_never_live_row_is_not_rounded_up(strategy):
    """Issue 31: a row with lower == upper holds no bytes, so its size is never
    aligned: 2^64 - 1 at alignment 16 was refused ("size overflows when aligned")."""
    placed = mm.place([0, 0], [0, 1], [2**64 - 1, 8], strategy=strategy, alignment=16)
    assert placed.offsets.tolist() == [0, 0] and placed.size == 16
    with pytest.raises(mm.PlanError) as e:  # a live row of that size still overflows
        mm.place([0, 0], [1, 1], [2**64 - 1, 8], strategy=strategy, alignment=16)
    assert _code(e) == "ALLOCATION_OVERFLOW" and e.value.tensor == "0"


def test_c_graph_from_arrays_refuses_view_base_below_minus_one():
    """Issue 31: view_base = -7 was taken as -1 (a storage tensor) and the
    graph accepted; Graph.from_arrays refuses it, and so must the C API."""
    lib = _c_library()
    lib.emel_last_error_message.restype = ctypes.c_char_p
    lib.emel_last_error_tensor.restype = ctypes.c_char_p
    u64 = lambda *v: (ctypes.c_uint64 * len(v))(*v)  # noqa: E731
    for base, status in (((-1, 0), 0), ((-7, -1), 1), ((-1, -2**63), 1), ((-1, 2), 1)):
        a = GraphArrays(num_tensors=2, num_nodes=1, size=u64(4, 4), in_start=u64(0, 1),
                        in_index=u64(0), out_start=u64(0, 1), out_index=u64(1),
                        view_base=(ctypes.c_int64 * 2)(*base))
        out = ctypes.c_void_p()
        assert lib.emel_graph_from_arrays(ctypes.byref(a), None, ctypes.byref(out)) == status, base
        if status:
            assert not out.value and b"view base index" in lib.emel_last_error_message()
            assert lib.emel_last_error_tensor() == (b"t0" if base[0] != -1 else b"t1")
        else:
            lib.emel_graph_destroy(out)
    with pytest.raises(mm.PlanError):
        mm.Graph.from_arrays(np.array([4, 4], np.uint64), (np.array([0, 1], np.uint64), np.array([0], np.uint64)),
                             (np.array([0, 1], np.uint64), np.array([1], np.uint64)), view_of=np.array([-7, -1]))


def test_c_enum_arguments_out_of_range_are_refused():
    """Issue 31: enum arguments (role, phase, mode, strategy, fit, hash kind,
    ggml op, status) are read as integers and checked before any conversion:
    -1 was loaded as the enum type first (or passed on by value), undefined
    behaviour that UBSan reports (scripts/sanitize.sh runs this test against
    the sanitized library: before the fix it aborts there)."""
    lib = _c_library()
    P, S, U64, I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int
    lib.emel_last_error_message.restype = ctypes.c_char_p
    lib.emel_graph_add_tensor.argtypes = [P, ctypes.c_char_p, U64, I, U64, I, ctypes.c_char_p, U64]
    lib.emel_graph_set_node_phase.argtypes = [P, ctypes.c_char_p, I]
    lib.emel_plan_hash.argtypes = [P, I, ctypes.c_char_p]
    lib.emel_place_ex.argtypes = [ctypes.POINTER(U64)] * 3 + [S, I, I, U64, U64, U64,
                                                              ctypes.POINTER(U64), ctypes.POINTER(U64)]
    invalid = 7  # EMEL_INVALID_ARGUMENT
    g = P()
    assert lib.emel_graph_create(b"g", ctypes.byref(g)) == 0
    plan = P()
    try:
        for role in (-1, -2**31, 7, 2**31 - 1):
            assert lib.emel_graph_add_tensor(g, b"x", 8, role, 0, 0, None, 0) == invalid
            assert f"unknown role {role}".encode() in lib.emel_last_error_message()
        assert lib.emel_graph_add_tensor(g, b"x", 8, 1, 0, 0, None, 0) == 0
        assert lib.emel_graph_add_tensor(g, b"y", 8, 5, 0, 0, None, 0) == 0
        ins, outs = (ctypes.c_char_p * 1)(b"x"), (ctypes.c_char_p * 1)(b"y")
        assert lib.emel_graph_add_node(g, b"n", ins, S(1), outs, S(1)) == 0
        assert lib.emel_graph_set_node_phase(g, b"n", -1) == invalid
        for field in range(3):  # mode, strategy, fit: the options' first three ints
            opts = (ctypes.c_uint8 * 512)()
            assert lib.emel_plan_options_default(opts) == 0
            ctypes.cast(opts, ctypes.POINTER(ctypes.c_int32))[field] = -1
            assert lib.emel_plan_create(g, opts, ctypes.byref(plan)) == invalid, field
            assert not plan.value
        opts = (ctypes.c_uint8 * 512)()
        assert lib.emel_plan_options_default(opts) == 0
        assert lib.emel_plan_create(g, opts, ctypes.byref(plan)) == 0
        out = ctypes.create_string_buffer(32)
        assert lib.emel_plan_hash(plan, -1, out) == invalid
        assert b"unknown hash kind -1" in lib.emel_last_error_message()
        row = (U64 * 1)(0)
        for strategy, fit in ((-1, 0), (0, -1)):
            assert lib.emel_place_ex(row, (U64 * 1)(1), (U64 * 1)(8), 1, strategy, fit, 1, 1, 0,
                                     (U64 * 1)(), None) == invalid
        gg_graph = P()
        assert lib.emel_ggml_graph_create(ctypes.byref(gg_graph)) == 0
        lib.emel_ggml_graph_add_tensor.argtypes = [P, ctypes.c_char_p, U64, I, ctypes.c_uint32,
                                                   ctypes.POINTER(S), S, S, U64, ctypes.POINTER(S)]
        assert lib.emel_ggml_graph_add_tensor(gg_graph, b"a", 8, -1, 0, None, 0, S(-1).value, 0,
                                              None) == invalid
        lib.emel_ggml_graph_destroy(gg_graph)
        lib.emel_status_name.restype = ctypes.c_char_p
        assert [lib.emel_status_name(s) for s in (-1, 7, 2**31 - 1)] == [
            b"UNKNOWN", b"INVALID_ARGUMENT", b"UNKNOWN"]
    finally:
        if plan.value:
            lib.emel_plan_destroy(plan)
        lib.emel_graph_destroy(g)


def test_repeated_json_keys_are_refused_naming_the_object(tmp_path):
    """JSON leaves an object with a repeated key to the parser (Python keeps
    the last value): a tensor giving two shapes would be planned with one of
    them, silently. Refused, from a string and from a file, naming the key
    and the tensor or node."""
    tensor = '{"id": "a", "shape": [4], "shape": [4096], "dtype": "f32", "role": "input"}'
    doc = ('{"format": "emel.graph/1", "tensors": [%s, {"id": "b", "shape": [4], "dtype": "f32", '
           '"role": "output"}], "nodes": [{"id": "n0", "op": "relu", "inputs": ["a"], "outputs": ["b"]}]}')
    with pytest.raises(mm.PlanError) as e:
        mm.load_graph(doc % tensor)
    assert _code(e) == "INVALID_IR_SHAPES" and e.value.tensor == "a"
    assert "repeats the key 'shape'" in str(e.value) and "<string>" in str(e.value)
    path = tmp_path / "g.json"
    path.write_text((doc % tensor.replace('"shape": [4096], ', '')).replace('"op": "relu"', '"op": "relu", "op": "add"'))
    with pytest.raises(mm.PlanError) as e:
        mm.load_graph(path)
    assert e.value.node == "n0" and "repeats the key 'op'" in str(e.value) and str(path) in str(e.value)
    path.write_text(doc % tensor.replace('"shape": [4096], ', ''))
    assert [t["shape"] for t in mm.load_graph(path).tensors] == [[4], [4]]
