"""Property tests: the C++ core agrees with the pure-Python reference (E0).

For random valid graphs (tests/graphgen.py) and random plan kwargs, in every
mode:

* E0: ``emel.memory.plan(g, **kw).to_dict() == emel.memory.reference.plan(g, **kw)``
  and ``Plan.to_json() == json.dumps(reference_plan, sort_keys=True)``
  (docs/api.md: ``to_json(indent=None)`` is the document as text with sorted
  keys, i.e. ``json.dumps(..., sort_keys=True)``);
* both plans pass the independent checker of tests/invariants.py;
* planning twice gives the same text; the graph dict is not modified.

Corrupted graphs (exactly one defect) make both raise ``PlanError`` with the
same ``.code`` -- the one docs/algorithm.md assigns to that defect -- and
naming the same tensor / node / arena.

Hypothesis profiles live in conftest.py (``CI=1`` selects 500 examples).
"""

import copy
import json

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import emel.memory as mm
import graphgen
from invariants import check_plan, plan_diff as diff

try:
    from emel.memory import reference as ref
except ImportError:  # being written
    ref = None

PlanError = mm.PlanError
HAVE_CORE = hasattr(mm, "plan")
needs_core = pytest.mark.skipif(not HAVE_CORE, reason="emel.memory.plan (C++ core) not built")
needs_ref = pytest.mark.skipif(ref is None, reason="emel.memory.reference not written yet")


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def text_diff(a, b):
    """The first differing position of two texts, with context."""
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return (f"texts differ at char {i} (len {len(a)} vs {len(b)}):\n"
            f"  core: ...{a[max(0, i - 60):i + 60]!r}\n"
            f"  ref:  ...{b[max(0, i - 60):i + 60]!r}")


def checker_verdict(g, p, mode, kw):
    try:
        check_plan(g, p, mode, **kw)
        return "passes the checker"
    except AssertionError as e:
        return f"fails the checker: {e}"


def core_plan(g, mode, kw):
    return mm.plan(copy.deepcopy(g), mode=mode, **{"strategy": "tmmu", **kw})


def ref_plan(g, mode, kw):
    return ref.plan(copy.deepcopy(g), mode=mode, **kw)


def _config_kwargs(kw):
    return {k: v for k, v in kw.items() if k in ("arenas", "alignment")}


def outcome(fn):
    """('ok', value) or ('error', PlanError)."""
    try:
        return "ok", fn()
    except PlanError as e:
        return "error", e


# ---------------------------------------------------------------------------
# the generator itself
# ---------------------------------------------------------------------------
@given(graphgen.graphs())
def test_generated_graphs_are_valid(g):
    graphgen.check_generated_graph(g)
    json.dumps(g)


# ---------------------------------------------------------------------------
# invariants and determinism, per implementation
# ---------------------------------------------------------------------------
@needs_ref
@given(graphgen.graphs(), graphgen.plan_kwargs(include_mode=False))
def test_reference_plans_satisfy_invariants(g, kw):
    original = copy.deepcopy(g)
    for mode in graphgen.MODES:
        p = ref.plan(g, mode=mode, **kw)
        assert g == original, "reference.plan modified its input"
        check_plan(g, p, mode, **kw)
        again = ref.plan(g, mode=mode, **kw)
        assert json.dumps(again, sort_keys=True) == json.dumps(p, sort_keys=True), "reference not deterministic"


@needs_core
@given(graphgen.graphs(), graphgen.plan_kwargs(include_mode=False))
def test_core_plans_satisfy_invariants(g, kw):
    original = copy.deepcopy(g)
    for mode in graphgen.MODES:
        plan = mm.plan(g, mode=mode, **{"strategy": "tmmu", **kw})
        assert g == original, "emel.memory.plan modified its input"
        d = plan.to_dict()
        check_plan(g, d, mode, **kw)
        text = plan.to_json()
        assert json.loads(text) == d
        assert mm.plan(g, mode=mode, **{"strategy": "tmmu", **kw}).to_json() == text, "core not deterministic"
        assert "allocation_time_ns" not in d["metrics"]
        assert "allocation_time_ns" in plan.metrics


# ---------------------------------------------------------------------------
# E0: the core equals the reference, as dicts and as text
# ---------------------------------------------------------------------------
@needs_core
@needs_ref
@given(graphgen.graphs(), graphgen.plan_kwargs(include_mode=False))
def test_core_equals_reference(g, kw):
    for mode in graphgen.MODES:
        c_kind, c = outcome(lambda: core_plan(g, mode, kw))
        r_kind, r = outcome(lambda: ref_plan(g, mode, kw))
        if c_kind == "error" or r_kind == "error":
            # valid graphs and capacity-free configs never fail; report both sides
            raise AssertionError(
                f"mode={mode}: core {c_kind}: {c if c_kind == 'error' else 'plan'}; "
                f"reference {r_kind}: {r if r_kind == 'error' else 'plan'}")
        cd = c.to_dict()
        if cd != r:
            note(f"graph: {json.dumps(g, sort_keys=True)}")
            raise AssertionError(
                f"E0 violated (mode={mode}, kwargs={kw}):\n  " + "\n  ".join(diff(cd, r))
                + f"\ncore {checker_verdict(g, cd, mode, kw)}"
                + f"\nreference {checker_verdict(g, r, mode, kw)}")
        ct = c.to_json()
        rt = json.dumps(r, sort_keys=True)
        assert ct == rt, "E0 text violated: " + text_diff(ct, rt)
        assert core_plan(g, mode, kw).to_json() == ct, "core not deterministic"
        assert json.dumps(ref_plan(g, mode, kw), sort_keys=True) == rt, "reference not deterministic"


# ---------------------------------------------------------------------------
# errors: one defect -> the same PlanError code from both
# ---------------------------------------------------------------------------
def _raise_both(g, kw):
    """PlanError (or None) from each available implementation."""
    out = {}
    if HAVE_CORE:
        out["core"] = _error_of(lambda: mm.plan(copy.deepcopy(g), **{"strategy": "tmmu", **kw}))
    if ref is not None:
        out["reference"] = _error_of(lambda: ref.plan(copy.deepcopy(g), **kw))
    if not out:
        pytest.skip("no planner available yet")
    return out


def _error_of(fn):
    try:
        fn()
    except PlanError as e:
        return e
    except Exception as e:  # anything but PlanError is a bug on bad input
        raise AssertionError(f"raised {type(e).__name__} instead of PlanError: {e!r}") from e
    return None


@given(graphgen.corrupted_graphs(), graphgen.plan_kwargs())
def test_corrupted_graphs_raise_the_same_code(case, kw):
    kind, g, expected = case
    errors = _raise_both(g, kw)
    for who, e in errors.items():
        assert e is not None, f"{who} accepted a graph with defect {kind!r}"
    codes = {who: e.code for who, e in errors.items()}
    assert len(set(codes.values())) == 1, f"defect {kind!r}: different codes {codes}; " + "; ".join(
        f"{w}: {e}" for w, e in errors.items())
    assert set(codes.values()) == {expected}, f"defect {kind!r}: expected {expected}, got {codes}"


@given(graphgen.corrupted_graphs(), graphgen.plan_kwargs())
def test_corrupted_graphs_blame_the_same_ids(case, kw):
    kind, g, expected = case
    errors = _raise_both(g, kw)
    if len(errors) < 2 or any(e is None for e in errors.values()):
        return   # the code test reports these
    blame = {who: (e.code, e.tensor, e.node, e.arena) for who, e in errors.items()}
    assert blame["core"] == blame["reference"], (
        f"defect {kind!r}: (code, tensor, node, arena) differ: {blame}; messages: "
        + "; ".join(f"{w}: {e}" for w, e in errors.items()))


@needs_core
@needs_ref
@given(graphgen.multi_corrupted_graphs(), graphgen.plan_kwargs())
def test_several_defects_first_one_reported_alike(case, kw):
    """With 2..4 defects both report the same first one (phase order, then
    document order): same code, tensor, node and arena."""
    kinds, g = case
    errors = _raise_both(g, kw)
    blame = {who: None if e is None else (e.code, e.tensor, e.node, e.arena) for who, e in errors.items()}
    assert blame["core"] == blame["reference"], (
        f"defects {kinds}: {blame}; messages: " + "; ".join(f"{w}: {e}" for w, e in errors.items()))


@given(graphgen.corrupted_configs())
def test_bad_configs_raise_the_same_code(case):
    kind, g, kw, expected = case
    errors = _raise_both(g, kw)
    for who, e in errors.items():
        assert e is not None, f"{who} accepted config defect {kind!r}: {kw}"
    blame = {who: (e.code, e.tensor, e.node, e.arena) for who, e in errors.items()}
    assert len(set(blame.values())) == 1, f"config defect {kind!r}: {blame}"
    if expected is not None:
        assert next(iter(blame.values()))[0] == expected, f"config defect {kind!r}: {blame}, expected {expected}"


@needs_core
@needs_ref
@given(graphgen.graphs(max_nodes=80), graphgen.plan_kwargs(), st.data())
def test_capacity_limits_agree(g, kw, data):
    """Capacities around the needed arena sizes: both fit, or both raise
    ARENA_TOO_SMALL naming the same arena and tensor."""
    base = ref.plan(copy.deepcopy(g), **kw)
    names = sorted(base["arenas"])
    arenas = copy.deepcopy(kw.get("arenas") or {})
    for name in data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True), label="arenas"):
        size = base["arenas"][name]["size"]
        cap = data.draw(st.sampled_from(
            [size, max(size - 1, 0), size // 2, 0, size + 1, max(size - 128, 0)]), label=f"capacity of {name}")
        arenas.setdefault(name, {})["capacity_bytes"] = cap
    kw = dict(kw, arenas=arenas)
    c_kind, c = outcome(lambda: mm.plan(copy.deepcopy(g), **{"strategy": "tmmu", **kw}).to_dict())
    r_kind, r = outcome(lambda: ref.plan(copy.deepcopy(g), **kw))
    assert c_kind == r_kind, f"core {c_kind}: {c if c_kind == 'error' else ''}; reference {r_kind}: {r if r_kind == 'error' else ''}"
    if c_kind == "ok":
        assert c == r, "\n  ".join(diff(c, r))
        check_plan(g, c, kw.get("mode", "inference"), **_config_kwargs(kw))
        for name, a in c["arenas"].items():
            if "capacity_bytes" in arenas.get(name, {}):
                assert a["size"] <= a["capacity_bytes"]
    else:
        assert c.code == r.code == "ARENA_TOO_SMALL", (c, r)
        assert (c.tensor, c.node, c.arena) == (r.tensor, r.node, r.arena), (
            f"ARENA_TOO_SMALL blames differ: core {c.tensor, c.arena} ({c}); reference {r.tensor, r.arena} ({r})")
        # the blamed arena really needed more than its capacity
        assert base["arenas"][c.arena]["size"] > arenas[c.arena]["capacity_bytes"]


@needs_core
@needs_ref
@given(graphgen.huge_cases())
def test_64_bit_limits_agree(case):
    """Sizes and alignments near 2^64: the same plan or the same error."""
    g, kw = case
    c_kind, c = outcome(lambda: mm.plan(copy.deepcopy(g), **{"strategy": "tmmu", **kw}).to_dict())
    r_kind, r = outcome(lambda: ref.plan(copy.deepcopy(g), **kw))
    assert c_kind == r_kind, (
        f"core {c_kind}: {c if c_kind == 'error' else ''}; reference {r_kind}: {r if r_kind == 'error' else ''}")
    if c_kind == "ok":
        assert c == r, "\n  ".join(diff(c, r))
        check_plan(g, c, kw.get("mode", "inference"), **_config_kwargs(kw))
    else:
        assert (c.code, c.tensor, c.node, c.arena) == (r.code, r.tensor, r.node, r.arena), (
            f"core: {c!r} {(c.tensor, c.node, c.arena)}; reference: {r!r} {(r.tensor, r.node, r.arena)}")
