"""The C API (include/emel/memory.h), as a C runtime sees it from the installed wheel.

Compiles tests/c/test_c_api.c with the system C compiler against
``emel.memory.native.include_dir()`` / ``library_path()``, runs it, and checks
its output; checks that the header compiles as strict C99 and as C++; and,
through ctypes, checks that random graphs planned through the C API give
exactly what ``emel.memory.plan()`` gives (plans, error codes and blamed ids).
Run from outside the source tree so the installed package is the one imported.
"""

import ctypes
import json
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import emel.memory as mm
import graphgen
from emel.memory import determinism, native, sharding, vocabulary
from emel.memory import ggml as gg
from repo_data import GRAPH_FILES, graph_path

HERE = os.path.dirname(os.path.abspath(__file__))
C_TEST = os.path.join(HERE, "c", "test_c_api.c")
MODEL_GRAPHS = [p.stem for p in GRAPH_FILES]

# The lines test_c_api.c prints (its header comment derives every number).
EXPECTED_LINES = [
    "tmmu arena activations size=2560 lower_bound=2500",
    "tmmu arena parameters size=4096 lower_bound=4096",
    "tmmu tensor x offset=1024 arena=0 birth=0 death=0",
    "tmmu tensor w offset=0 arena=1 birth=0 death=2",
    "tmmu tensor a offset=0 arena=0 birth=0 death=1",
    "tmmu tensor h offset=0 arena=0 birth=1 death=2",
    "tmmu tensor hv offset=512 arena=0 birth=1 death=2",
    "tmmu tensor y offset=1024 arena=0 birth=2 death=2",
    "greedy_by_size arena activations size=2560 lower_bound=2500",
    "greedy_by_size arena parameters size=4096 lower_bound=4096",
    "greedy_by_size tensor x offset=0 arena=0 birth=0 death=0",
    "greedy_by_size tensor w offset=0 arena=1 birth=0 death=2",
    "greedy_by_size tensor a offset=1536 arena=0 birth=0 death=1",
    "greedy_by_size tensor h offset=1536 arena=0 birth=1 death=2",
    "greedy_by_size tensor hv offset=2048 arena=0 birth=1 death=2",
    "greedy_by_size tensor y offset=0 arena=0 birth=2 death=2",
    "error INVALID_IR_SHAPES tensor=ghost node=bad "
    "message=[INVALID_IR_SHAPES] node 'bad' reads unknown tensor 'ghost'",
    "error INVALID_ARGUMENT message=[INVALID_ARGUMENT] emel_plan_num_arenas: plan is NULL",
    "error ARENA_TOO_SMALL arena=activations",
    "determinism error [INVALID_IR_SHAPES] rank must be in [0, world_size) = [0, 4), got 4",
    "arrays arena activations size=2560 t5 offset=1024",
    "place greedy_by_size offsets=224,0,224 size=352",
    # ggml-style allocators: llama.cpp test-alloc sizes (shared ggml-alloc behaviour doc)
    "ggml max_size_too_many_tensors size=24 chunks=16,8",
    "ggml tensor_larger_than_max_size size=24 chunks=24",
    "ggml tensor_larger_than_max_size other layout size=48 chunks=24,24",
    "ggml tensor_larger_than_max_size same layout size=24 chunks=24",
    "ggml not_enough_chunks size=136 chunks=8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,16",
    "ggml prefer_already_allocated_memory size=28 chunks=28",
    "ggml prefer_already_allocated_memory x2=0/0/0",
    "ggml multiple_buffer_types A=40 B=24",
    "ggml reallocation g1 size=40 x3=0/1/0",
    "ggml reallocation g2 size=40 y2=0/0/0",
    "ggml tallocr a=0 b=32 then ARENA_TOO_SMALL tensor=c",
    # the names listed are the core's strategy table's, after ggml's own
    "ggml error [INVALID_ARGUMENT] emel_ggml_gallocr_create: strategy must be "
    + ", ".join(repr(s) for s in ("ggml",) + vocabulary.STRATEGIES[:-1])
    + f" or {vocabulary.STRATEGIES[-1]!r}, got 'fastest'",
    "ggml error INVALID_IR_SHAPES tensor=y",
    "ALL OK",
]


def _compiler(env_var, candidates):
    if os.environ.get(env_var):
        return os.environ[env_var].split()
    for name in candidates:
        path = shutil.which(name)
        if path:
            return [path]
    pytest.skip(f"no compiler found (set {env_var} or install one of {', '.join(candidates)})")


@pytest.fixture(scope="module")
def native_paths():
    # A CMake build tree instead of the installed wheel (local development):
    # EMEL_C_API_BUILD_DIR=build pytest tests/test_c_api.py
    build = os.environ.get("EMEL_C_API_BUILD_DIR")
    if build:
        library = os.path.join(os.path.abspath(build), "libemel_memory_c.so")
        assert os.path.isfile(library), f"EMEL_C_API_BUILD_DIR: no {library}"
        return os.path.join(os.path.dirname(HERE), "include"), library
    try:
        return native.include_dir(), native.library_path()
    except FileNotFoundError as e:
        if os.environ.get("CI"):
            raise  # the installed wheel must carry the C API
        pytest.skip(f"emel.memory imported from {os.path.dirname(native.__file__)} "
                    f"has no C API files (not an installed build): {e}")


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def test_native_paths(native_paths):
    if os.environ.get("EMEL_C_API_BUILD_DIR"):
        pytest.skip("paths of a build tree, not of emel.memory.native")
    include, library = native_paths
    assert os.path.isfile(os.path.join(include, "emel", "memory.h"))
    assert os.path.isfile(library)
    assert os.path.basename(library).startswith(("libemel_memory_c", "emel_memory_c"))
    assert native.library_dir() == os.path.dirname(library)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX compiler driver flags")
def test_c_program(native_paths, tmp_path):
    include, library = native_paths
    cc = _compiler("CC", ("cc", "gcc", "clang"))
    exe = str(tmp_path / "test_c_api")
    lib_dir = os.path.dirname(library)
    build = _run(cc + ["-std=c99", "-Wall", "-Wextra", "-I", include, C_TEST, "-o", exe,
                       "-L", lib_dir, "-lemel_memory_c", f"-Wl,-rpath,{lib_dir}"])
    assert build.returncode == 0, f"compiling {C_TEST} failed:\n{build.stdout}\n{build.stderr}"
    run = _run([exe], cwd=str(tmp_path))
    assert run.returncode == 0, f"test_c_api failed:\n{run.stdout}\n{run.stderr}"
    lines = run.stdout.splitlines()
    assert not [line for line in lines if line.startswith("FAIL")], run.stdout
    missing = [line for line in EXPECTED_LINES if line not in lines]
    assert not missing, f"missing lines {missing}; output:\n{run.stdout}"
    _check_printed_hashes(lines)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX compiler driver flags")
def test_header_is_strict_c99(native_paths, tmp_path):
    include, _ = native_paths
    cc = _compiler("CC", ("cc", "gcc", "clang"))
    src = tmp_path / "header.c"
    src.write_text('#include "emel/memory.h"\n'
                   "int main(void) { emel_plan_options o; (void)o; return EMEL_OK; }\n")
    res = _run(cc + ["-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only",
                     "-I", include, str(src)])
    assert res.returncode == 0, res.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX compiler driver flags")
def test_header_compiles_as_cpp(native_paths, tmp_path):
    include, _ = native_paths
    cxx = _compiler("CXX", ("c++", "g++", "clang++"))
    src = tmp_path / "header.cpp"
    src.write_text('#include "emel/memory.h"\n'
                   "static_assert(EMEL_OK == 0, \"status 0 is success\");\n"
                   "int main() { emel_plan* p = nullptr; emel_plan_destroy(p); return 0; }\n")
    res = _run(cxx + ["-std=c++11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only",
                      "-I", include, str(src)])
    assert res.returncode == 0, res.stderr



# --------------------------------------------------------------------------
# ctypes: the C API against emel.memory.plan() on random graphs
# --------------------------------------------------------------------------
# include/emel/memory.h's emel_status, in order (the C API raises the core's six codes only)
STATUS = ("OK", "INVALID_IR_SHAPES", "LIVENESS_CYCLE", "ALLOCATION_OVERFLOW", "ARENA_TOO_SMALL",
          "ALIGNMENT_VIOLATION", "ADDRESS_COLLISION", "INVALID_ARGUMENT", "OUT_OF_MEMORY", "INTERNAL")
STRATEGY_CODES = vocabulary.STRATEGY_CODES  # the core's table; test_header_enums_match_tables checks the header
MODE_CODES = {m: i for i, m in enumerate(mm.MODES)}
ROLE_CODES = {r: i for i, r in enumerate(graphgen.ROLES)}
PHASE_CODES = {None: 0, "forward": 1, "backward": 2}
NO_INDEX = ctypes.c_size_t(-1).value
CASES = [(s, f) for s in vocabulary.STRATEGIES for f in (vocabulary.FITS if s == "greedy_by_size" else ("best",))]
ROLE_ARENAS = [None, {"gradient": "activations"}, {"activation": "scratch", "output": "Ärena-ü/1"}]
_U64 = 2**64


class ArenaConfig(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("alignment_bytes", ctypes.c_uint64),
                ("has_capacity", ctypes.c_int), ("capacity_bytes", ctypes.c_uint64),
                ("has_page_size", ctypes.c_int), ("page_size", ctypes.c_uint64),
                ("has_persistent", ctypes.c_int), ("persistent", ctypes.c_int)]


class PlanOptions(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("strategy", ctypes.c_int), ("fit", ctypes.c_int),
                ("time_budget_ms", ctypes.c_uint64), ("default_alignment", ctypes.c_uint64),
                ("arenas", ctypes.POINTER(ArenaConfig)), ("num_arenas", ctypes.c_size_t),
                ("role_arenas", ctypes.c_char_p * 6)]


class ShardEntry(ctypes.Structure):
    _fields_ = [("tensor_id", ctypes.c_char_p), ("axis", ctypes.c_uint64)]


class DeterminismOptions(ctypes.Structure):
    _fields_ = [("has_replay_token", ctypes.c_int), ("replay_token", ctypes.c_uint8 * 32),
                ("rank", ctypes.c_uint64), ("world_size", ctypes.c_uint64),
                ("shard_spec", ctypes.POINTER(ShardEntry)), ("num_shard_entries", ctypes.c_size_t)]


class TensorPlacement(ctypes.Structure):
    _fields_ = [("offset", ctypes.c_uint64), ("size", ctypes.c_uint64), ("arena", ctypes.c_size_t),
                ("birth", ctypes.c_uint32), ("death", ctypes.c_uint32), ("is_view", ctypes.c_int),
                ("view_of", ctypes.c_size_t), ("inplace_of", ctypes.c_size_t)]


class CError(Exception):
    def __init__(self, status, lib):
        self.code = STATUS[status] if 0 <= status < len(STATUS) else f"status {status}"
        self.message = lib.emel_last_error_message().decode()
        text = lambda f: f().decode() or None  # noqa: E731
        self.tensor = text(lib.emel_last_error_tensor)
        self.node = text(lib.emel_last_error_node)
        self.arena = text(lib.emel_last_error_arena)
        super().__init__(self.message)


@pytest.fixture(scope="module")
def lib(native_paths):
    _, library = native_paths
    lib = ctypes.CDLL(library)
    P, S, U64, I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int
    CP, CPP = ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)
    sigs = {
        "emel_graph_create": [CP, ctypes.POINTER(P)],
        "emel_graph_destroy": [P],
        "emel_graph_add_tensor": [P, CP, U64, I, U64, I, CP, U64],
        "emel_graph_add_node": [P, CP, CPP, S, CPP, S],
        "emel_graph_add_output": [P, CP],
        "emel_graph_set_tensor_arena": [P, CP, CP],
        "emel_graph_set_saved_for_backward": [P, CP, I],
        "emel_graph_add_must_not_alias": [P, CP, CP],
        "emel_graph_set_node_phase": [P, CP, I],
        "emel_graph_set_execution_order": [P, CPP, S],
        "emel_plan_options_default": [ctypes.POINTER(PlanOptions)],
        "emel_plan_create": [P, ctypes.POINTER(PlanOptions), ctypes.POINTER(P)],
        "emel_plan_destroy": [P],
        "emel_plan_num_arenas": [P, ctypes.POINTER(S)],
        "emel_plan_arena_name": [P, S, CPP],
        "emel_plan_arena_size": [P, S, ctypes.POINTER(U64)],
        "emel_plan_arena_lower_bound": [P, S, ctypes.POINTER(U64)],
        "emel_plan_num_tensors": [P, ctypes.POINTER(S)],
        "emel_plan_tensor_id": [P, S, CPP],
        "emel_plan_tensor": [P, S, ctypes.POINTER(TensorPlacement)],
        "emel_graph_add_tensor_shaped": [P, CP, CP, ctypes.POINTER(U64), S, I, U64, I, U64, I, CP,
                                         U64],
        "emel_determinism_options_default": [ctypes.POINTER(DeterminismOptions)],
        "emel_plan_create_ex": [P, ctypes.POINTER(PlanOptions),
                                ctypes.POINTER(DeterminismOptions), ctypes.POINTER(P)],
        "emel_plan_hash": [P, I, ctypes.POINTER(ctypes.c_uint8)],
        "emel_plan_hash_hex": [P, I, CP, S],
        "emel_plan_replay_token": [P, ctypes.POINTER(ctypes.c_uint8)],
        "emel_plan_replay_token_hex": [P, CP, S],
        "emel_plan_rank": [P, ctypes.POINTER(U64)],
        "emel_plan_world_size": [P, ctypes.POINTER(U64)],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = None if name.endswith("_destroy") else ctypes.c_int
    for name in ("emel_last_error_message", "emel_last_error_tensor", "emel_last_error_node",
                 "emel_last_error_arena"):
        getattr(lib, name).argtypes = []
        getattr(lib, name).restype = ctypes.c_char_p
    return lib


class _Inexpressible(Exception):
    """A document the C builder cannot state (shape / dtype defects, alignment 0)."""


def _size_of(t):
    """The nbytes the C builder gets, when phase A would accept the tensor's shape fields."""
    if t.get("role") not in ROLE_CODES or not isinstance(t.get("dtype"), str) or not t["dtype"]:
        raise _Inexpressible
    shape = t.get("shape")
    if not isinstance(shape, list) or any(type(d) is not int or not 0 <= d < _U64 for d in shape):
        raise _Inexpressible
    nbytes = t.get("nbytes")
    if nbytes is not None and not (type(nbytes) is int and 0 <= nbytes < _U64):
        raise _Inexpressible
    elem = graphgen.DTYPE_SIZES.get(t["dtype"])
    if elem is None:
        if nbytes is None:
            raise _Inexpressible
        return nbytes
    shape_bytes = elem
    for d in shape:
        shape_bytes *= d
    if shape_bytes >= _U64 or (nbytes is not None and t.get("view_of") is None
                               and nbytes != shape_bytes):
        raise _Inexpressible
    return shape_bytes if nbytes is None else nbytes


def _ids(values):
    arr = (ctypes.c_char_p * max(len(values), 1))(*[v.encode() for v in values])
    return arr, len(values)


def _c_graph(lib, doc, g, sizes=None):
    """Build `doc` into the C graph handle `g`: with emel_graph_add_tensor and
    `sizes` (the nbytes of each tensor), or, when sizes is None, with
    emel_graph_add_tensor_shaped and the document's own shape / dtype / nbytes."""
    def ok(status):
        if status != 0:
            raise CError(status, lib)

    ok(lib.emel_graph_create(doc.get("name", "").encode(), ctypes.byref(g)))
    for k, t in enumerate(doc["tensors"]):
        view = t.get("view_of")
        common = (ROLE_CODES[t["role"]], t.get("alignment") or 0, 1 if t.get("can_inplace") else 0,
                  view["base"].encode() if view else None,
                  (view.get("byte_offset") or 0) if view else 0)
        if sizes is not None:
            ok(lib.emel_graph_add_tensor(g, t["id"].encode(), sizes[k], *common))
        else:
            shape = t["shape"]
            dims = (ctypes.c_uint64 * max(len(shape), 1))(*shape)
            nbytes = t.get("nbytes")
            ok(lib.emel_graph_add_tensor_shaped(g, t["id"].encode(), t["dtype"].encode(), dims,
                                                len(shape), nbytes is not None, nbytes or 0,
                                                *common))
    for t in doc["tensors"]:
        if t.get("arena") is not None:
            ok(lib.emel_graph_set_tensor_arena(g, t["id"].encode(), t["arena"].encode()))
        if t.get("saved_for_backward"):
            ok(lib.emel_graph_set_saved_for_backward(g, t["id"].encode(), 1))
        for other in t.get("must_not_alias") or []:
            ok(lib.emel_graph_add_must_not_alias(g, t["id"].encode(), other.encode()))
    for n in doc["nodes"]:
        (ins, n_in), (outs, n_out) = _ids(n.get("inputs") or []), _ids(n.get("outputs") or [])
        ok(lib.emel_graph_add_node(g, n["id"].encode(), ins, n_in, outs, n_out))
        if n.get("phase") is not None:
            ok(lib.emel_graph_set_node_phase(g, n["id"].encode(), PHASE_CODES[n["phase"]]))
    if doc.get("execution_order") is not None:
        order, count = _ids(doc["execution_order"])
        ok(lib.emel_graph_set_execution_order(g, order, count))
    for out in doc.get("outputs") or []:
        ok(lib.emel_graph_add_output(g, out.encode()))


def _c_plan(lib, doc, mode="inference", strategy="tmmu", fit="best", alignment=None,
            arenas=None, role_arenas=None):
    """Plan `doc` through the C API: a dict like the one _py_plan gives, or CError."""
    sizes = [_size_of(t) for t in doc["tensors"]]
    for t in doc["tensors"]:
        if t.get("alignment") == 0 or (t.get("alignment") is not None and type(t["alignment"]) is not int):
            raise _Inexpressible
    g, p = ctypes.c_void_p(), ctypes.c_void_p()

    def ok(status):
        if status != 0:
            raise CError(status, lib)

    try:
        _c_graph(lib, doc, g, sizes)
        opt = PlanOptions()
        ok(lib.emel_plan_options_default(ctypes.byref(opt)))
        opt.mode, opt.strategy = MODE_CODES[mode], STRATEGY_CODES[strategy]
        opt.fit, opt.time_budget_ms = (1 if fit == "first" else 0), 2
        if alignment is not None:
            opt.default_alignment = alignment
        configs = sorted((arenas or {}).items())
        table = (ArenaConfig * max(len(configs), 1))()
        for entry, (name, cfg) in zip(table, configs):
            entry.name = name.encode()
            entry.alignment_bytes = cfg.get("alignment_bytes") or 0
            for key in ("capacity_bytes", "page_size", "persistent"):
                if cfg.get(key) is not None:
                    setattr(entry, "has_" + key.replace("_bytes", ""), 1)
                    setattr(entry, key, int(cfg[key]))
        opt.arenas, opt.num_arenas = table, len(configs)
        for role, name in (role_arenas or {}).items():
            opt.role_arenas[ROLE_CODES[role]] = name.encode()
        ok(lib.emel_plan_create(g, ctypes.byref(opt), ctypes.byref(p)))

        n, name, u64 = ctypes.c_size_t(), ctypes.c_char_p(), ctypes.c_uint64()
        ok(lib.emel_plan_num_arenas(p, ctypes.byref(n)))
        arena_names, result = [], {"arenas": {}, "tensors": {}}
        for k in range(n.value):
            ok(lib.emel_plan_arena_name(p, k, ctypes.byref(name)))
            ok(lib.emel_plan_arena_size(p, k, ctypes.byref(u64)))
            size = u64.value
            ok(lib.emel_plan_arena_lower_bound(p, k, ctypes.byref(u64)))
            arena_names.append(name.value.decode())
            result["arenas"][arena_names[-1]] = (size, u64.value)
        ok(lib.emel_plan_num_tensors(p, ctypes.byref(n)))
        ids = []
        for i in range(n.value):
            ok(lib.emel_plan_tensor_id(p, i, ctypes.byref(name)))
            ids.append(name.value.decode())
        tp = TensorPlacement()
        for i, tid in enumerate(ids):
            ok(lib.emel_plan_tensor(p, i, ctypes.byref(tp)))
            view = tp.is_view != 0
            result["tensors"][tid] = (
                arena_names[tp.arena], tp.offset, tp.size,
                None if view else tp.birth, None if view else tp.death,
                ids[tp.view_of] if tp.view_of != NO_INDEX else None,
                ids[tp.inplace_of] if tp.inplace_of != NO_INDEX else None)
        return result
    finally:
        lib.emel_plan_destroy(p)
        lib.emel_graph_destroy(g)


# The C API's options default to tmmu and plan the specification's arena
# layout (no arena_layout option); Python is asked for the same.
C_DEFAULTS = {"strategy": "tmmu", "arena_layout": "separate"}


def _py_plan(doc, **kw):
    plan = mm.plan(doc, **{**C_DEFAULTS, **dict(kw, time_budget_ms=2)})
    return {"arenas": {n: (a.size, a.lower_bound) for n, a in plan.arenas.items()},
            "tensors": {tid: (t.arena, t.offset, t.size, t.birth, t.death, t.view_of, t.inplace_of)
                        for tid, t in plan.tensors.items()}}


def _outcome(fn):
    try:
        return fn()
    except (mm.PlanError, CError) as e:
        return ("error", e.code, e.tensor, e.node, e.arena)


@given(graphgen.graphs(max_nodes=80), graphgen.plan_kwargs(), st.sampled_from(CASES),
       st.sampled_from(ROLE_ARENAS))
def test_c_api_plans_like_python(lib, doc, kw, case, role_arenas):
    strategy, fit = case
    kw = dict(kw, strategy=strategy, fit=fit, role_arenas=role_arenas)
    try:
        c = _outcome(lambda: _c_plan(lib, doc, **kw))
    except _Inexpressible:
        assume(False)
    assert c == _outcome(lambda: _py_plan(doc, **kw))


@given(graphgen.corrupted_graphs(), graphgen.plan_kwargs(), st.sampled_from(CASES[:2]))
def test_c_api_errors_like_python(lib, case, kw, strategy_fit):
    kind, doc, _ = case
    kw = dict(kw, strategy=strategy_fit[0], fit=strategy_fit[1])
    try:
        c = _outcome(lambda: _c_plan(lib, doc, **kw))
    except _Inexpressible:
        assume(False)
    py = _outcome(lambda: _py_plan(doc, **kw))
    assert c == py, f"defect {kind!r}: C API {c}, Python {py}"



# --------------------------------------------------------------------------
# ctypes: the determinism contract (hashes, replay token, rank, world size)
# --------------------------------------------------------------------------
HASH_KINDS = ("ir_hash", "execution_order_hash", "arena_config_hash", "shard_spec_hash", "plan_hash")


def _c_hashes(lib, doc, mode="inference", replay_token=None, rank=0, world_size=1,
              shard_spec=None, shaped=True):
    """Plan `doc` through emel_plan_create_ex and read back what the plan says
    of its determinism inputs (every hash both as raw bytes and as hex)."""
    sizes = None if shaped else [_size_of(t) for t in doc["tensors"]]
    if any(t.get("alignment") == 0 for t in doc["tensors"]):
        raise _Inexpressible
    g, p = ctypes.c_void_p(), ctypes.c_void_p()
    try:
        _c_graph(lib, doc, g, sizes)
        opt, det = PlanOptions(), DeterminismOptions()
        _ok(lib, lib.emel_plan_options_default(ctypes.byref(opt)))
        opt.mode = MODE_CODES[mode]
        _ok(lib, lib.emel_determinism_options_default(ctypes.byref(det)))
        if replay_token is not None:
            det.has_replay_token = 1
            det.replay_token[:] = list(replay_token)
        det.rank, det.world_size = rank, world_size
        entries = sorted((shard_spec or {}).items(), reverse=True)  # any order will do
        table = (ShardEntry * max(len(entries), 1))(*[(t.encode(), a) for t, a in entries])
        det.shard_spec, det.num_shard_entries = table, len(entries)
        _ok(lib, lib.emel_plan_create_ex(g, ctypes.byref(opt), ctypes.byref(det), ctypes.byref(p)))
        out = {"hashes": {}}
        hex_buf, raw = ctypes.create_string_buffer(65), (ctypes.c_uint8 * 32)()
        for kind, name in enumerate(HASH_KINDS):
            _ok(lib, lib.emel_plan_hash_hex(p, kind, hex_buf, 65))
            _ok(lib, lib.emel_plan_hash(p, kind, raw))
            assert bytes(raw).hex() == hex_buf.value.decode()
            out["hashes"][name] = hex_buf.value.decode()
        _ok(lib, lib.emel_plan_replay_token(p, raw))
        _ok(lib, lib.emel_plan_replay_token_hex(p, hex_buf, 65))
        assert bytes(raw).hex() == hex_buf.value.decode()
        out["replay_token"] = bytes(raw)
        u64 = ctypes.c_uint64()
        _ok(lib, lib.emel_plan_rank(p, ctypes.byref(u64)))
        out["rank"] = u64.value
        _ok(lib, lib.emel_plan_world_size(p, ctypes.byref(u64)))
        out["world_size"] = u64.value
        return out
    finally:
        lib.emel_plan_destroy(p)
        lib.emel_graph_destroy(g)


def _py_hashes(doc, **kw):
    plan = mm.plan(doc, **{**C_DEFAULTS, **kw})
    return {"hashes": plan.hashes, "replay_token": plan.replay_token, "rank": plan.rank,
            "world_size": plan.world_size}


def _bytes_doc(doc):
    """The document a graph built with emel_graph_add_tensor states: every
    tensor shape [], dtype "bytes" and its byte size as nbytes."""
    tensors = [dict(t, shape=[], dtype="bytes", nbytes=_size_of(t)) for t in doc["tensors"]]
    return dict(doc, tensors=tensors)


def _model(name):
    return json.loads(graph_path(name).read_text())


# The graph of tests/c/test_c_api.c, as the document it hashes like.
TINY_DOC = {
    "format": "emel.graph/1", "name": "tiny", "outputs": ["y"],
    "tensors": [
        {"id": i, "shape": [], "dtype": "bytes", "nbytes": n, "role": r, **extra}
        for i, n, r, extra in [("x", 256, "input", {}), ("w", 4096, "parameter", {}),
                               ("a", 1000, "activation", {}),
                               ("h", 1000, "activation", {"can_inplace": True}),
                               ("hv", 256, "activation", {"view_of": {"base": "h", "byte_offset": 512}}),
                               ("y", 1500, "activation", {})]],
    "nodes": [{"id": "scale", "op": "scale", "inputs": ["x"], "outputs": ["a"]},
              {"id": "relu", "op": "relu", "inputs": ["a"], "outputs": ["h"]},
              {"id": "matmul", "op": "matmul", "inputs": ["h", "w"], "outputs": ["y"]}],
}


def _check_printed_hashes(lines):
    """The "hashes ..." lines of test_c_api.c against emel.memory.plan()."""
    printed = {}
    for line in lines:
        if line.startswith("hashes "):
            _, label, *fields = line.split()
            printed[label] = dict(field.split("=", 1) for field in fields)
    assert set(printed) == {"default", "custom"}, lines

    def expect(plan_hashes, token, rank, world_size):
        out = {key.removesuffix("_hash"): value for key, value in plan_hashes.items()}
        return dict(out, token=token.hex(), rank=str(rank), world_size=str(world_size))

    default = mm.plan(TINY_DOC, strategy="tmmu")
    assert printed["default"] == expect(default.hashes, default.replay_token, 0, 1)
    # custom: token bytes 7i+1, rank 1 of 4, spec {w: 0, a: 1} given as a hash
    # input only (the C API does not shard; Python would shard the graph, so
    # its plan hash is recomputed from the document with that spec's hash).
    token = bytes(i * 7 + 1 for i in range(32))
    custom = mm.plan(TINY_DOC, strategy="tmmu", replay_token=token, rank=1, world_size=4).to_dict()
    custom["hashes"]["shard_spec_hash"] = determinism.shard_spec_hash({"w": 0, "a": 1}).hex()
    custom["hashes"]["plan_hash"] = determinism.plan_hash_of_document(custom)
    assert printed["custom"] == expect(custom["hashes"], token, 1, 4)


@pytest.mark.parametrize("name", MODEL_GRAPHS)
def test_c_api_hashes_match_python_on_model_graphs(lib, name):
    """Shaped tensors hash like the JSON document; with a custom token, rank
    and world size; and with add_tensor (bytes only) like the bytes document."""
    doc = _model(name)
    mode = "backward" if name.endswith("training") else "inference"
    token = bytes(range(100, 132))
    assert _c_hashes(lib, doc, mode) == _py_hashes(doc, mode=mode)
    kw = dict(mode=mode, replay_token=token, rank=2, world_size=3)
    assert _c_hashes(lib, doc, **kw) == _py_hashes(doc, **kw)
    if name == "resnet18-inference":
        assert _c_hashes(lib, doc, shaped=False) == _py_hashes(_bytes_doc(doc))


def test_c_api_hashes_of_a_sharded_graph(lib):
    """The C API given rank 1's share (shard_graph) and the spec gives the
    plan and hashes plan(graph, shard_spec=...) gives."""
    doc = _model("llama-tiny-inference")
    spec = sharding.tensor_parallel_spec(doc, 2)
    assert spec
    share = sharding.shard_graph(doc, 1, 2, spec)
    c = _c_hashes(lib, share, rank=1, world_size=2, shard_spec=spec)
    py = _py_hashes(doc, rank=1, world_size=2, shard_spec=spec)
    assert c == py
    assert c["hashes"]["ir_hash"] != mm.plan(doc, strategy="tmmu").hashes["ir_hash"]  # the share, not the graph


@settings(max_examples=60)  # small graphs, a few dozen cases: the contract, not the planner
@given(graphgen.graphs(max_nodes=8), st.sampled_from(mm.MODES),
       st.one_of(st.none(), st.binary(min_size=32, max_size=32)),
       st.integers(1, 2**64 - 1).flatmap(lambda w: st.tuples(st.integers(0, w - 1), st.just(w))),
       st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=4),
                       st.integers(0, 2**64 - 1), max_size=3),
       st.booleans())
def test_c_api_hashes_match_python_on_random_graphs(lib, doc, mode, token, rank_world, spec, shaped):
    """Random graphs, tokens, ranks, world sizes; a shard spec as a hash input
    (compared through the plan document, as Python would shard the graph)."""
    rank, world_size = rank_world
    try:
        py_doc = doc if shaped else _bytes_doc(doc)
        if any(not isinstance(d, int) for t in py_doc["tensors"] for d in t["shape"]):
            raise _Inexpressible  # symbolic dimensions
        c = _outcome(lambda: _c_hashes(lib, doc, mode, token, rank, world_size, spec, shaped))
    except _Inexpressible:
        assume(False)
    py = _outcome(lambda: mm.plan(py_doc, **C_DEFAULTS, mode=mode, replay_token=token, rank=rank,
                                  world_size=world_size).to_dict())
    if not isinstance(py, tuple):  # not an error
        py["hashes"]["shard_spec_hash"] = determinism.shard_spec_hash(spec).hex()
        py["hashes"]["plan_hash"] = determinism.plan_hash_of_document(py)
        py = {"hashes": py["hashes"], "replay_token": bytes.fromhex(py["replay_token"]),
              "rank": py["rank"], "world_size": py["world_size"]}
    assert c == py


def test_c_api_determinism_argument_errors(lib):
    """Python's order and codes; C-only defects are INVALID_ARGUMENT."""
    cases = [(dict(rank=3, world_size=3), "INVALID_IR_SHAPES"),
             (dict(world_size=0), "INVALID_IR_SHAPES"),
             (dict(shard_spec={"": 0}), "INVALID_IR_SHAPES")]
    for kw, code in cases:
        with pytest.raises(CError) as c:
            _c_hashes(lib, TINY_DOC, **kw)
        with pytest.raises(mm.PlanError) as py:
            mm.plan(TINY_DOC, **{**C_DEFAULTS, **kw})
        assert c.value.code == py.value.code == code
    p = ctypes.c_void_p()
    assert lib.emel_plan_create_ex(None, None, None, ctypes.byref(p)) == STATUS.index("INVALID_ARGUMENT")
    assert p.value is None


# --------------------------------------------------------------------------
# ctypes: the C API's ggml-style graph allocator against emel.memory.ggml
# --------------------------------------------------------------------------


class GgmlAddress(ctypes.Structure):
    _fields_ = [("buffer_id", ctypes.c_int32), ("chunk", ctypes.c_int32), ("offset", ctypes.c_uint64)]


@pytest.fixture(scope="module")
def ggml_lib(lib):
    P, S, U64, I32, I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int32, ctypes.c_int
    PS, PU64, PI = ctypes.POINTER(S), ctypes.POINTER(U64), ctypes.POINTER(I)
    PA, PI32 = ctypes.POINTER(GgmlAddress), ctypes.POINTER(I32)
    sigs = {
        "emel_ggml_graph_create": [ctypes.POINTER(P)],
        "emel_ggml_graph_destroy": [P],
        "emel_ggml_graph_add_tensor": [P, ctypes.c_char_p, U64, I, ctypes.c_uint32, PS, S, S, U64, PS],
        "emel_ggml_graph_add_node": [P, S],
        "emel_ggml_graph_add_leaf": [P, S],
        "emel_ggml_graph_tensor_address": [P, S, PA],
        "emel_ggml_buffer_type_create": [U64, U64, ctypes.POINTER(P)],
        "emel_ggml_buffer_type_destroy": [P],
        "emel_ggml_gallocr_create": [ctypes.POINTER(P), S, ctypes.c_char_p, U64, ctypes.POINTER(P)],
        "emel_ggml_gallocr_destroy": [P],
        "emel_ggml_gallocr_reserve_n": [P, P, PI32, PI32],
        "emel_ggml_gallocr_reserve_n_size": [P, P, PI32, PI32, PU64],
        "emel_ggml_gallocr_needs_realloc": [P, P, PI],
        "emel_ggml_gallocr_alloc_graph": [P, P, PI],
        "emel_ggml_gallocr_get_buffer_size": [P, I32, PU64],
        "emel_ggml_gallocr_tensor_address": [P, S, PA],
        "emel_ggml_gallocr_tensor_inplace_of": [P, S, PS],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = None if name.endswith("_destroy") else ctypes.c_int
    return lib


def _ok(lib, status):
    if status != 0:
        raise CError(status, lib)


def _ggml_order(graph):
    """Tensors in the order emel.memory.ggml.GraphAllocator indexes them (first
    appearance over leafs then nodes, each followed by its sources and view
    root), so both sides break placement ties alike."""
    tensors, index = [], {}
    for t in graph.leafs + graph.nodes:
        for x in [t] + [s for s in t.src if s is not None] + [t.view_src] * (t.view_src is not None):
            if id(x) not in index:
                index[id(x)] = len(tensors)
                tensors.append(x)
    return tensors, index


class CGgml:
    """A ggml graph and a graph allocator made through the C API."""

    def __init__(self, lib, graph, buffer_types, strategy="ggml"):
        self.lib, self.graph = lib, graph
        self.tensors, self.index = _ggml_order(graph)
        self.g, self.ga = ctypes.c_void_p(), ctypes.c_void_p()
        _ok(lib, lib.emel_ggml_graph_create(ctypes.byref(self.g)))
        for t in self.tensors:
            assert t.layout is None  # only byte-size layouts here
            srcs = [NO_INDEX if s is None else self.index[id(s)] for s in t.src]
            arr = (ctypes.c_size_t * max(len(srcs), 1))(*srcs)
            op = 0 if t.op == "NONE" else 2 if t.op in gg.INPLACE_OPS else 1
            view = NO_INDEX if t.view_src is None else self.index[id(t.view_src)]
            _ok(lib, lib.emel_ggml_graph_add_tensor(self.g, t.name.encode(), t.nbytes, op, t.flags, arr,
                                                    len(srcs), view, t.view_offs, None))
        for t in graph.nodes:
            _ok(lib, lib.emel_ggml_graph_add_node(self.g, self.index[id(t)]))
        for t in graph.leafs:
            _ok(lib, lib.emel_ggml_graph_add_leaf(self.g, self.index[id(t)]))
        handles, distinct = [], {}
        for bt in buffer_types:  # the same BufferType object = the same handle
            if id(bt) not in distinct:
                h = ctypes.c_void_p()
                _ok(lib, lib.emel_ggml_buffer_type_create(bt.alignment, bt.max_size, ctypes.byref(h)))
                distinct[id(bt)] = h
            handles.append(distinct[id(bt)])
        arr = (ctypes.c_void_p * len(handles))(*[h.value for h in handles])
        try:
            _ok(lib, lib.emel_ggml_gallocr_create(arr, len(handles), strategy.encode(), 200,
                                                  ctypes.byref(self.ga)))
        finally:
            for h in distinct.values():
                lib.emel_ggml_buffer_type_destroy(h)
        self.n_buffers = len(buffer_types)

    def close(self):
        self.lib.emel_ggml_gallocr_destroy(self.ga)
        self.lib.emel_ggml_graph_destroy(self.g)

    @staticmethod
    def _ids(ids):
        return None if ids is None else (ctypes.c_int32 * max(len(ids), 1))(*ids)

    def reserve_n(self, node_ids=None, leaf_ids=None):
        _ok(self.lib, self.lib.emel_ggml_gallocr_reserve_n(self.ga, self.g, self._ids(node_ids),
                                                           self._ids(leaf_ids)))

    def reserve_n_size(self, node_ids=None, leaf_ids=None):
        sizes = (ctypes.c_uint64 * self.n_buffers)()
        _ok(self.lib, self.lib.emel_ggml_gallocr_reserve_n_size(self.ga, self.g, self._ids(node_ids),
                                                                self._ids(leaf_ids), sizes))
        return list(sizes)

    def flag(self, fn):
        out = ctypes.c_int(-1)
        _ok(self.lib, fn(self.ga, self.g, ctypes.byref(out)))
        return out.value

    def buffer_sizes(self):
        size = ctypes.c_uint64()
        out = []
        for b in range(self.n_buffers):
            _ok(self.lib, self.lib.emel_ggml_gallocr_get_buffer_size(self.ga, b, ctypes.byref(size)))
            out.append(size.value)
        return out

    def planned(self):
        """(addresses by name, in-place partners by name) of the last plan."""
        a, p = GgmlAddress(), ctypes.c_size_t()
        addresses, inplace = {}, {}
        for i, t in enumerate(self.tensors):
            _ok(self.lib, self.lib.emel_ggml_gallocr_tensor_address(self.ga, i, ctypes.byref(a)))
            if a.buffer_id >= 0:
                addresses[t.name] = (a.buffer_id, a.chunk, a.offset)
            _ok(self.lib, self.lib.emel_ggml_gallocr_tensor_inplace_of(self.ga, i, ctypes.byref(p)))
            if p.value != NO_INDEX:
                inplace[t.name] = self.tensors[p.value].name
        return addresses, inplace

    def bound(self):
        a, out = GgmlAddress(), {}
        for i, t in enumerate(self.tensors):
            _ok(self.lib, self.lib.emel_ggml_graph_tensor_address(self.g, i, ctypes.byref(a)))
            out[t.name] = (a.buffer_id, a.chunk, a.offset) if a.buffer_id >= 0 else None
        return out


@pytest.mark.parametrize("name", MODEL_GRAPHS)
def test_c_ggml_allocator_matches_python_on_model_graphs(ggml_lib, name):
    """Through ctypes: the same buffer sizes, per-tensor (buffer, chunk,
    offset), in-place partners and bound addresses as emel.memory.ggml, for
    ggml's exact placement and, on the two small graphs, strategy auto."""
    strategies = ["ggml"] + (["auto"] if name.startswith(("resnet18-inf", "mobilenet")) else [])
    for strategy in strategies:
        graph, ts = gg.from_emel_graph(graph_path(name))
        py = gg.GraphAllocator(gg.BufferType(32), strategy=strategy)
        c = CGgml(ggml_lib, graph, [gg.BufferType(32)], strategy)
        try:
            assert c.flag(ggml_lib.emel_ggml_gallocr_needs_realloc) == 1
            c.reserve_n()
            py.reserve(graph)
            assert c.buffer_sizes() == [py.get_buffer_size(0)] and c.buffer_sizes()[0] > 0
            assert c.planned() == (py.addresses, py.inplace_of)
            assert c.flag(ggml_lib.emel_ggml_gallocr_needs_realloc) == 0
            assert c.flag(ggml_lib.emel_ggml_gallocr_alloc_graph) == 1
            assert py.alloc_graph(graph)
            assert c.bound() == {t.name: t.address for t in c.tensors}
        finally:
            c.close()
    if name == "resnet18-inference":  # the ggml-alloc baseline
        assert py.get_buffer_size(0) == 6422528


def _random_ggml(seed):
    """A small random ggml graph: inputs, a pre-allocated weight, ops that may
    run in place, views; its last tensor is OUTPUT."""
    import random
    r = random.Random(seed)
    ts = [gg.Tensor(f"in{i}", r.choice([4, 8, 16, 24, 40]), flags=gg.INPUT) for i in range(r.randint(1, 4))]
    if r.random() < 0.3:
        ts.append(gg.Tensor("w", 16, flags=gg.HAS_DATA))
    for i in range(r.randint(1, 12)):
        if r.random() < 0.15:
            p = r.choice(ts)
            root = p.view_src or p
            ts.append(gg.Tensor(f"v{i}", r.choice([4, 8]), op="VIEW", src=[p], view_src=root,
                                view_offs=p.view_offs + r.choice([0, 4])))
        else:
            ts.append(gg.Tensor(f"n{i}", r.choice([4, 8, 16, 24, 32]),
                                op=r.choice(["ADD", "MUL", "MEAN", "PAD", "SCALE"]),
                                src=r.sample(ts, min(len(ts), r.randint(1, 3)))))
    ts[-1].flags |= gg.OUTPUT
    if ts[-1].view_src is not None:
        ts[-1].view_src.flags |= gg.OUTPUT
    return gg.build_forward([ts[-1]])


@given(st.integers(0, 2**32 - 1), st.sampled_from(["ggml", "ggml", "greedy_by_size"]),
       st.sampled_from([1, 2, 3]))
def test_c_ggml_allocator_matches_python_on_random_graphs(ggml_lib, seed, strategy, n_types):
    """Several buffer ids (two sharing one type when n_types is 3), random
    node / leaf buffer ids, max sizes that force chunks: reserve_n,
    reserve_n_size, alloc_graph agree with the Python wrapper."""
    import random
    r = random.Random(seed)
    a = gg.BufferType(r.choice([4, 8, 32]), r.choice([16, 32, 64, gg.SIZE_MAX]))
    b = gg.BufferType(8, r.choice([32, gg.SIZE_MAX]))
    types = {1: [a], 2: [a, b], 3: [a, b, a]}[n_types]
    graph = _random_ggml(seed)
    node_ids = [r.randrange(len(types)) for _ in graph.nodes]
    leaf_ids = [r.randrange(len(types)) for _ in graph.leafs]
    py = gg.GraphAllocator(types, strategy=strategy)
    c = CGgml(ggml_lib, graph, types, strategy)
    try:
        py_sizes = _outcome(lambda: py.reserve_n_size(graph, node_ids, leaf_ids))
        assert _outcome(lambda: c.reserve_n_size(node_ids, leaf_ids)) == py_sizes
        if py_sizes[0] == "error":
            return
        py.reserve_n(graph, node_ids, leaf_ids)
        c.reserve_n(node_ids, leaf_ids)
        assert c.buffer_sizes() == [py.get_buffer_size(i) for i in range(len(types))]
        assert c.planned() == (py.addresses, py.inplace_of)
        assert c.flag(ggml_lib.emel_ggml_gallocr_alloc_graph) == int(py.alloc_graph(graph))
        assert c.bound() == {t.name: t.address for t in c.tensors}
    finally:
        c.close()


def test_emel_place_never_live_rows_return(native_paths):
    """Issue 11: rows with lower == upper hung auto / optimal through emel_place.
    Run in a child with a timeout, so a hang fails this test, not the run."""
    _, library = native_paths
    code = f"""
import ctypes
lib = ctypes.CDLL({library!r})
U = ctypes.c_uint64 * 3
for strategy in (3, 4):  # EMEL_STRATEGY_AUTO, EMEL_STRATEGY_OPTIMAL
    off, end = U(9, 9, 9), ctypes.c_uint64(99)
    status = lib.emel_place(U(5, 10, 22), U(5, 24, 22), U(1000, 7, 1991), ctypes.c_size_t(3),
                            strategy, ctypes.c_uint64(1), ctypes.c_uint64(1), off, ctypes.byref(end))
    print(status, list(off), end.value)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["0 [0, 0, 0] 7", "0 [0, 0, 0] 7"]


def test_header_enums_match_core_tables(native_paths):
    """include/emel/memory.h's enums are the core tables' codes, name for name
    (core/tables.hpp; status.hpp checks the same at compile time)."""
    import re
    include, _ = native_paths
    text = open(os.path.join(include, "emel", "memory.h"), encoding="utf-8").read()

    def enum(prefix):
        return {name.lower(): int(code) for name, code in re.findall(rf"\bEMEL_{prefix}_(\w+) = (\d+),", text)
                if name != "MAX_ENUM_"}

    assert enum("STRATEGY") == vocabulary.STRATEGY_CODES
    assert enum("MODE") == {m: i for i, m in enumerate(vocabulary.MODES)}
    assert enum("FIT") == {f: i for i, f in enumerate(vocabulary.FITS)}
    assert enum("ROLE") == {r.name: r.code for r in vocabulary.ROLE_TABLE}
