"""E0 for the offset strategies: the C++ core equals the pure-Python reference.

``greedy_by_size`` (``fit="best"`` and ``"first"``) and ``best_fit``
(docs/strategies.md §1-§3) are implemented twice -- ``src/emel/memory/placement`` and
``emel.memory.reference`` -- and must agree bit for bit:

* for random valid graphs (tests/graphgen.py), random plan kwargs and a random
  ``role_arenas``, in every mode: ``mm.plan(g, strategy=..., fit=..., **kw)
  .to_dict() == reference.plan(g, strategy=..., fit=..., **kw)``, the same as
  text, the plan passes :func:`check_offset_plan` (below) and planning twice
  gives the same text;
* capacities around the needed sizes: both fit, or both raise ARENA_TOO_SMALL
  naming the same arena and tensor; a corrupted graph raises the same error
  from both, whatever the strategy;
* hand-computed unit tests of §1-§3, ``fit``, ``role_arenas`` and the
  argument checks;
* every model graph of data/graphs.

tests/invariants.py checks slot plans only (every storage entry must have a
``slot``, ``slots`` must be an integer), so offset plans get their own
independent checker here, written from docs/formats.md and docs/strategies.md
(it imports neither implementation).

Hypothesis profiles: tests/conftest.py (``CI=1`` selects ``ci``).
"""

import copy
import json

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import emel.memory as mm
import graphgen
from emel.memory import reference as ref
from invariants import analyze_graph, check_no_overlap, plan_diff as diff
from repo_data import GRAPH_FILES

PlanError = mm.PlanError

#: (strategy, fit) pairs under test, and the ``method`` each arena records.
#: (from the core's strategy table: the offset strategies the reference implements)
CASES = tuple((s, f) for s in ref.OFFSET_STRATEGIES
              for f in (ref.FITS if s == "greedy_by_size" else ("best",)))
METHOD = {("greedy_by_size", "best"): "greedy_by_size",
          ("greedy_by_size", "first"): "greedy_by_size_first_fit",
          ("best_fit", "best"): "best_fit"}
CASE_IDS = [f"{s}-{f}" for s, f in CASES]

#: role_arenas values for the property tests (None most of the time).
ROLE_ARENAS = (
    None, None, None,
    {"gradient": "activations"},
    {"optimizer_state": "scratch"},
    {"parameter": "activations"},            # parameters in a reusing arena
    {"activation": "scratch", "output": "kv_cache"},
    {"input": "Ärena-ü/1", "gradient": "parameters"},
)


# ---------------------------------------------------------------------------
# an independent checker of offset plans (docs/formats.md, docs/strategies.md)
# ---------------------------------------------------------------------------
DEFAULT_ROLE_ARENA = {
    "parameter": "parameters", "optimizer_state": "parameters",
    "gradient": "gradients",
    "input": "activations", "activation": "activations", "output": "activations",
}
PERSISTENT_ROLES = ("parameter", "optimizer_state")
NEVER_VICTIM_ROLES = ("input", "output", "parameter", "optimizer_state")
ARENA_KEYS = {"size", "alignment", "slots", "lower_bound", "page_size", "persistent"}
METRIC_MAPS = ("peak_logical_slots", "peak_physical_bytes", "lower_bound", "peak_live_bytes",
               "max_live", "storage_tensors", "memory_reuse_ratio", "internal_fragmentation_ratio")


def _align_up(x, a):
    return -(-x // a) * a


def _overlap(o1, s1, o2, s2):
    return s1 > 0 and s2 > 0 and o1 < o2 + s2 and o2 < o1 + s1


def _ratio(a, b):
    return 1.0 - float(a) / float(b) if b else 0.0


def check_offset_plan(graph, plan, mode, *, strategy, fit="best", arenas=None, alignment=None,
                      role_arenas=None, tmmu_plan=None):
    """Assert every documented invariant of a ``greedy_by_size`` / ``best_fit``
    plan: keys (no ``slot`` in offset arenas, ``slots: null`` and ``method``),
    lifetimes, views, alignment, bounds, legal in-place pairs only, no live
    overlap, must_not_alias, the persistent arenas' sequential slots, arena
    sizes, metrics. ``tmmu_plan``: births and deaths must equal its own."""
    f = analyze_graph(graph, mode)
    config = {name: dict(cfg or {}) for name, cfg in (arenas or {}).items()}
    default_alignment = 128 if alignment is None else alignment
    by_role = dict(DEFAULT_ROLE_ARENA, **(role_arenas or {}))
    arena_of = {}
    for tid in f.storage:
        arena_of[tid] = f.by_id[tid].get("arena") or by_role[f.by_id[tid]["role"]]
    for tid in f.ids:
        arena_of[tid] = arena_of[f.root[tid]]

    assert set(plan) == {"format", "graph", "mode", "strategy", "steps", "arenas", "tensors", "metrics",
                         "hashes", "replay_token", "rank", "world_size"}, sorted(plan)  # determinism.md
    assert plan["format"] == "emel.plan/1"
    assert plan["graph"] == (graph.get("name") or "")
    assert plan["mode"] == mode and plan["strategy"] == strategy
    assert plan["steps"] == f.n
    P, A, M = plan["tensors"], plan["arenas"], plan["metrics"]
    assert set(P) == set(f.ids), "tensor entries"

    # ---- arenas -------------------------------------------------------------
    assert set(A) == set(arena_of[t] for t in f.storage) | set(config), ("arenas", sorted(A))
    persistent = {}
    for name, a in A.items():
        cfg = config.get(name, {})
        persistent[name] = cfg.get("persistent", name == "parameters")
        keys = set(ARENA_KEYS)
        if "capacity_bytes" in cfg:
            keys.add("capacity_bytes")
            assert a["capacity_bytes"] == cfg["capacity_bytes"] and a["size"] <= a["capacity_bytes"], name
        if not persistent[name]:
            keys.add("method")
            assert a["slots"] is None, ("an offset arena has slots: null", name, a["slots"])
            assert a["method"] == METHOD[strategy, fit], ("method", name, a["method"])
        else:
            assert isinstance(a["slots"], int), ("a persistent arena keeps its slots", name)
        assert set(a) == keys, ("arena keys", name, sorted(a))
        assert a["alignment"] == cfg.get("alignment_bytes", default_alignment), ("alignment", name)
        assert a["page_size"] == cfg.get("page_size", 4096) and a["persistent"] == persistent[name], name
        assert a["size"] % a["alignment"] == 0, ("arena size not aligned", name)

    # ---- storage tensors and views ---------------------------------------------
    for tid in f.storage:
        e = P[tid]
        keys = {"arena", "offset", "size", "birth", "death"}
        if persistent[arena_of[tid]]:
            keys.add("slot")
        assert keys <= set(e) <= keys | {"inplace_of"}, ("storage keys", tid, sorted(e))
        assert e["arena"] == arena_of[tid], ("arena", tid, e["arena"], arena_of[tid])
        assert (e["size"], e["birth"], e["death"]) == (f.size[tid], f.birth[tid], f.death[tid]), ("lifetime", tid)
        if tmmu_plan is not None:
            t = tmmu_plan["tensors"][tid]
            assert (e["birth"], e["death"]) == (t["birth"], t["death"]), ("births/deaths differ from tmmu", tid)
    for tid in f.ids:
        if not f.is_view[tid]:
            continue
        e, r = P[tid], f.root[tid]
        assert set(e) == {"arena", "offset", "size", "view_of"}, (tid, sorted(e))
        assert (e["view_of"], e["arena"], e["size"]) == (r, arena_of[r], f.size[tid]), ("view", tid)
        assert e["offset"] == P[r]["offset"] + f.root_off[tid], ("view offset", tid)
        if f.by_id[tid].get("alignment"):
            assert e["offset"] % f.by_id[tid]["alignment"] == 0, ("view misaligned", tid)

    # ---- alignment, bounds ------------------------------------------------------
    eff = {}
    for tid in f.storage:
        own = [f.by_id[x].get("alignment") or 1 for x in [tid] + f.views_of[tid]]
        eff[tid] = max([A[arena_of[tid]]["alignment"]] + own)
        assert P[tid]["offset"] % eff[tid] == 0, ("misaligned", tid, P[tid]["offset"], eff[tid])
    for tid in f.ids:
        assert P[tid]["offset"] + P[tid]["size"] <= A[P[tid]["arena"]]["size"], ("past the arena end", tid)

    # ---- in-place pairs -------------------------------------------------------------
    victims = set()
    group = {tid: tid for tid in f.storage}          # tensor -> first member of its group
    for tid in sorted(f.storage, key=lambda t: (f.birth[t], t)):
        i = P[tid].get("inplace_of")
        if i is None:
            continue
        t = f.by_id[tid]
        s = f.prod.get(tid)
        assert i in f.storage and i != tid and i not in victims, ("victim", tid, i)
        victims.add(i)
        assert t.get("can_inplace") and s is not None and t["role"] not in PERSISTENT_ROLES, ("taker", tid)
        assert not persistent[arena_of[tid]] and arena_of[i] == arena_of[tid], ("in-place arena", tid, i)
        assert i in f.step_inputs[s] and f.death[i] == s == f.birth[tid], ("in-place steps", tid, i)
        assert P[i]["offset"] == P[tid]["offset"], ("in-place offsets", tid, i)
        assert f.by_id[i]["role"] not in NEVER_VICTIM_ROLES and i not in f.is_output, ("victim role", tid, i)
        assert mode == "inference" or i not in f.saved, ("saved victim", tid, i)
        touched = set(f.step_inputs[s]) | set(f.step_outputs[s])
        assert not touched & set(f.views_of[i]), ("victim has a live alias", tid, i)
        assert f.size[i] >= f.size[tid], ("victim smaller", tid, i)
        group[tid] = group[i]
    members = {}
    for tid in f.storage:
        members.setdefault(group[tid], []).append(tid)
    for x, y in f.mna_roots:
        assert group[x] != group[y], ("must_not_alias pair in one in-place group", x, y)
    buffer_size = {g0: max(_align_up(f.size[t], eff[t]) for t in ms) for g0, ms in members.items()}

    # ---- per arena ---------------------------------------------------------------------
    assert set(M) == set(METRIC_MAPS) | {"total_bytes", "total_lower_bound"}, sorted(M)
    for key in METRIC_MAPS:
        assert set(M[key]) == set(A), key
    for name, a in A.items():
        ts = [t for t in f.storage if arena_of[t] == name]
        if persistent[name]:
            ordered = sorted(ts)
            end, reserved = 0, {}
            for k, t in enumerate(ordered):
                assert P[t]["slot"] == k, ("persistent slot", t)
                o = 0 if k == 0 else _align_up(end, eff[t])
                assert P[t]["offset"] == o, ("persistent offset", t, P[t]["offset"], o)
                end = o + _align_up(f.size[t], eff[t])
                reserved[t] = _align_up(f.size[t], eff[t])
            assert a["size"] == (_align_up(end, a["alignment"]) if ts else 0), ("persistent size", name)
            assert a["slots"] == len(ts)
        else:
            reserved = {t: buffer_size[group[t]] for t in ts}
            end = max((P[t]["offset"] + reserved[t] for t in ts), default=0)
            assert a["size"] == _align_up(end, a["alignment"]), ("arena size", name, a["size"], end)
        check_no_overlap(f, P, name, ts, f.last + 1)  # invariants.py's, the one plan overlap check
        # live bytes and counts
        steps = f.last + 1
        cnt, byt, shared = [0] * (steps + 1), [0] * (steps + 1), [0] * (steps + 1)
        used = held = 0
        for t in ts:
            b, d = f.birth[t], f.death[t]
            cnt[b] += 1
            cnt[d + 1] -= 1
            byt[b] += f.size[t]
            byt[d + 1] -= f.size[t]
            v = P[t].get("inplace_of")
            if v is not None:
                cnt[b] -= 1
                cnt[b + 1] += 1
                # the bytes the pair shares count once in the lower bound
                first, last = max(b, f.birth[v]), min(d, f.death[v])
                if first <= last:
                    shared[first] += min(f.size[t], f.size[v])
                    shared[last + 1] -= min(f.size[t], f.size[v])
            used += f.size[t] * (d - b + 1)
            held += reserved[t] * (d - b + 1)
        max_live = lower = peak = c = s = sh = 0
        for k in range(steps):
            c += cnt[k]
            s += byt[k]
            sh += shared[k]
            max_live, lower, peak = max(max_live, c), max(lower, s - sh), max(peak, s)
        assert a["lower_bound"] == M["lower_bound"][name] == lower, ("lower_bound", name)
        assert M["peak_live_bytes"][name] == peak, ("peak_live_bytes", name)
        assert a["size"] >= lower, ("arena below its lower bound", name, a["size"], lower)
        assert M["max_live"][name] == max_live, ("max_live", name)
        if not any(P[t].get("inplace_of") for t in ts):
            assert a["size"] >= lower, ("arena below its lower bound", name, a["size"], lower)
        assert M["peak_physical_bytes"][name] == a["size"]
        assert M["storage_tensors"][name] == len(ts)
        assert M["peak_logical_slots"][name] == a["slots"], ("peak_logical_slots", name)
        if persistent[name]:
            assert M["memory_reuse_ratio"][name] == (_ratio(len(ts), len(ts)) if ts else 0.0)
        else:
            assert M["memory_reuse_ratio"][name] is None, ("memory_reuse_ratio", name)
        assert M["internal_fragmentation_ratio"][name] == _ratio(used, held), ("fragmentation", name)
    assert M["total_bytes"] == sum(a["size"] for a in A.values())
    assert M["total_lower_bound"] == sum(a["lower_bound"] for a in A.values())

    # ---- must_not_alias: never overlapping bytes ----------------------------------------
    for x, y in f.mna_pairs:
        if P[x]["arena"] == P[y]["arena"]:
            assert not _overlap(P[x]["offset"], P[x]["size"], P[y]["offset"], P[y]["size"]), ("mna", x, y)
    return True


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def layout_roles(role_arenas=None, layout=None, strategy="greedy_by_size"):
    """The role -> arena map a plan must follow under ``arena_layout`` (api.md):
    "pooled" (None's meaning except under tmmu) moves gradients to the
    activations arena unless the caller mapped them itself."""
    if (layout or ("separate" if strategy == "tmmu" else "pooled")) == "separate":
        return role_arenas
    return {"gradient": "activations", **(role_arenas or {})}


def outcome(fn):
    try:
        return "ok", fn()
    except PlanError as e:
        return "error", e


def both(g, **kw):
    """(core dict, core text, reference dict); both must plan."""
    c_kind, c = outcome(lambda: mm.plan(copy.deepcopy(g), **{"strategy": "tmmu", **kw}))
    r_kind, r = outcome(lambda: ref.plan(copy.deepcopy(g), **kw))
    if c_kind == "error" or r_kind == "error":
        raise AssertionError(f"{kw}: core {c_kind}: {c if c_kind == 'error' else 'plan'}; "
                             f"reference {r_kind}: {r if r_kind == 'error' else 'plan'}")
    return c.to_dict(), c.to_json(), r


def assert_e0(g, **kw):
    """Core == reference (dict and text); returns the reference plan."""
    cd, ct, r = both(g, **kw)
    if cd != r:
        note(f"graph: {json.dumps(g, sort_keys=True)}")
        raise AssertionError(f"E0 violated ({kw}):\n  " + "\n  ".join(diff(cd, r)))
    assert ct == json.dumps(r, sort_keys=True), "E0 text violated"
    return r


# ---------------------------------------------------------------------------
# E0 on random graphs
# ---------------------------------------------------------------------------
@given(graphgen.graphs(), graphgen.plan_kwargs(include_mode=False), st.sampled_from(ROLE_ARENAS),
       st.sampled_from((None, "pooled", "separate")))
def test_offset_strategies_core_equals_reference(g, kw, role_arenas, layout):
    original = copy.deepcopy(g)
    kw = dict(kw, role_arenas=role_arenas, arena_layout=layout)
    roles = layout_roles(role_arenas, layout)
    for mode in graphgen.MODES:
        tmmu = ref.plan(g, mode=mode, **dict(kw, role_arenas=roles, arena_layout="separate"))
        for strategy, fit in CASES:
            args = dict(kw, mode=mode, strategy=strategy, fit=fit)
            r = assert_e0(g, **args)
            check_offset_plan(g, r, mode, strategy=strategy, fit=fit, arenas=kw.get("arenas"),
                              alignment=kw.get("alignment"), role_arenas=roles, tmmu_plan=tmmu)
            text = json.dumps(r, sort_keys=True)
            assert mm.plan(g, **{"strategy": "tmmu", **args}).to_json() == text, "core not deterministic"
            assert json.dumps(ref.plan(g, **args), sort_keys=True) == text, "reference not deterministic"
            assert g == original, "plan() modified its input"


@given(graphgen.graphs(max_nodes=80), graphgen.plan_kwargs(), st.sampled_from(CASES), st.data())
def test_offset_capacity_limits_agree(g, kw, case, data):
    """Capacities around the needed sizes: both plan (equal), or both raise
    ARENA_TOO_SMALL naming the same arena and tensor."""
    strategy, fit = case
    base = ref.plan(copy.deepcopy(g), strategy=strategy, fit=fit, **kw)
    arenas = copy.deepcopy(kw.get("arenas") or {})
    for name in data.draw(st.lists(st.sampled_from(sorted(base["arenas"])), min_size=1, max_size=3, unique=True),
                          label="arenas"):
        size = base["arenas"][name]["size"]
        cap = data.draw(st.sampled_from([size, max(size - 1, 0), size // 2, 0, size + 1, max(size - 128, 0)]),
                        label=f"capacity of {name}")
        arenas.setdefault(name, {})["capacity_bytes"] = cap
    kw = dict(kw, arenas=arenas, strategy=strategy, fit=fit)
    c_kind, c = outcome(lambda: mm.plan(copy.deepcopy(g), **{"strategy": "tmmu", **kw}).to_dict())
    r_kind, r = outcome(lambda: ref.plan(copy.deepcopy(g), **kw))
    assert c_kind == r_kind, f"core {c_kind}: {c if c_kind == 'error' else ''}; reference {r_kind}: " \
                             f"{r if r_kind == 'error' else ''}"
    if c_kind == "ok":
        assert c == r, "\n  ".join(diff(c, r))
        check_offset_plan(g, c, kw.get("mode", "inference"), strategy=strategy, fit=fit, arenas=arenas,
                          alignment=kw.get("alignment"), role_arenas=layout_roles(kw.get("role_arenas")))
    else:
        assert c.code == r.code == "ARENA_TOO_SMALL", (c, r)
        assert (c.tensor, c.node, c.arena) == (r.tensor, r.node, r.arena), f"blames differ: core {c}; reference {r}"
        assert base["arenas"][c.arena]["size"] > arenas[c.arena]["capacity_bytes"]


# Validation is shared with tmmu (tests/test_properties.py covers it at full
# strength): at most 200 examples here, to keep this file near 60 s under CI.
@settings(max_examples=min(settings().max_examples, 200))
@given(graphgen.corrupted_graphs(), graphgen.plan_kwargs(), st.sampled_from(CASES))
def test_offset_strategies_blame_corrupted_graphs_alike(case, kw, strategy_fit):
    kind, g, expected = case
    strategy, fit = strategy_fit
    blame = {}
    for who, planner in (("core", mm.plan), ("reference", ref.plan)):
        kind_, e = outcome(lambda: planner(copy.deepcopy(g), strategy=strategy, fit=fit, **kw))
        assert kind_ == "error", f"{who} accepted a graph with defect {kind!r}"
        blame[who] = (e.code, e.tensor, e.node, e.arena)
    assert blame["core"] == blame["reference"], (kind, blame)
    assert blame["core"][0] == expected, (kind, blame)


# ---------------------------------------------------------------------------
# hand-computed unit tests (alignment=1 and uint8 sizes: bytes as written)
# ---------------------------------------------------------------------------
def interval_graph(specs, **fields):
    """Tensors (id, birth, death, bytes): node n{s} produces the tensors born at
    step s and reads those that die at s (born earlier)."""
    steps = max(d for _, _, d, _ in specs) + 1
    nodes = [{"id": f"n{s}", "op": "op",
              "inputs": [t for t, b, d, _ in specs if d == s and b < s],
              "outputs": [t for t, b, d, _ in specs if b == s]} for s in range(steps)]
    tensors = [{"id": t, "shape": [z], "dtype": "uint8", "role": "activation"} for t, _, _, z in specs]
    return dict({"format": "emel.graph/1", "name": "hand", "tensors": tensors, "nodes": nodes}, **fields)


def offsets(p):
    return {t: e["offset"] for t, e in p["tensors"].items()}


def test_greedy_by_size_and_best_fit_give_different_sizes():
    # Buffers (half-open): x 30 bytes [0,2), y 10 [0,4), z 40 [2,4). Lower bound 50.
    g = interval_graph([("x", 0, 1, 30), ("y", 0, 3, 10), ("z", 2, 3, 40)])
    # greedy_by_size: z (40) at 0; x (30) does not conflict with z -> 0;
    # y conflicts with x [0,30) and z [0,40): no gap -> on top at 40. Arena 50.
    p = assert_e0(g, strategy="greedy_by_size", alignment=1)
    assert offsets(p) == {"x": 0, "y": 40, "z": 0}
    assert p["arenas"]["activations"]["size"] == 50 == p["arenas"]["activations"]["lower_bound"]
    assert p["arenas"]["activations"]["method"] == "greedy_by_size"
    # best_fit: step 0 allocates x (30) then y (10): x at 0, y at 30, mark 40.
    # Step 2 frees x -> [0,30); z (40) does not fit, and no free block ends at
    # the mark (40) -> on top at 40. Arena 80.
    p = assert_e0(g, strategy="best_fit", alignment=1)
    assert offsets(p) == {"x": 0, "y": 30, "z": 40}
    assert p["arenas"]["activations"]["size"] == 80
    assert p["arenas"]["activations"]["method"] == "best_fit"
    m = p["metrics"]
    assert m["peak_logical_slots"] == {"activations": None}
    assert m["memory_reuse_ratio"] == {"activations": None}
    # every tensor fills its own buffer: no internal fragmentation
    assert m["internal_fragmentation_ratio"] == {"activations": 0.0}
    assert all("slot" not in e for e in p["tensors"].values())
    assert p["arenas"]["activations"]["slots"] is None


def test_first_fit_and_best_fit_choose_different_gaps():
    # a 10 [0,3), b 30 [2,5), c 10 [0,2), d 10 [0,5), e 20 [3,5).
    # Order: b (30), e (20), then the 10s by lifetime: d (5), a (3), c (2).
    #   b -> 0 [0,30); e conflicts b -> top 30 [30,50); d conflicts b, e -> 50;
    #   a conflicts b [0,30), d [50,60): gap [30,50) -> 30.
    #   c conflicts a [30,40), d [50,60): gaps [0,30) (30 bytes) and [40,50)
    #   (10 bytes): first fit takes 0, best fit the tighter 40.
    g = interval_graph([("a", 0, 2, 10), ("b", 2, 4, 30), ("c", 0, 1, 10), ("d", 0, 4, 10), ("e", 3, 4, 20)])
    best = assert_e0(g, strategy="greedy_by_size", fit="best", alignment=1)
    first = assert_e0(g, strategy="greedy_by_size", fit="first", alignment=1)
    assert offsets(best) == {"a": 30, "b": 0, "c": 40, "d": 50, "e": 30}
    assert offsets(first) == {"a": 30, "b": 0, "c": 0, "d": 50, "e": 30}
    assert best["arenas"]["activations"]["size"] == first["arenas"]["activations"]["size"] == 60
    assert first["arenas"]["activations"]["method"] == "greedy_by_size_first_fit"


def test_best_fit_grows_from_the_free_block_at_the_top():
    # p 10 [0,4), q 20 [0,1), r 40 [1,4). Step 0: q at 0, p at 20 (mark 30).
    # Step 1 frees q -> [0,20); r does not fit, and no free block ends at the
    # mark -> r at align_up(mark) = 30, arena 70.
    g = interval_graph([("p", 0, 3, 10), ("q", 0, 0, 20), ("r", 1, 3, 40)])
    p = assert_e0(g, strategy="best_fit", alignment=1)
    assert offsets(p) == {"p": 20, "q": 0, "r": 30}
    assert p["arenas"]["activations"]["size"] == 70
    # p 10 [0,4), q 20 [0,1), s 30 [0,1), r 40 [1,4): s at 0, q at 30, p at 50
    # (mark 60). Step 1 frees s and q -> [0,50); r (40) fits there at 0.
    g = interval_graph([("p", 0, 3, 10), ("q", 0, 0, 20), ("s", 0, 0, 30), ("r", 1, 3, 40)])
    p = assert_e0(g, strategy="best_fit", alignment=1)
    assert offsets(p) == {"p": 50, "q": 30, "r": 0, "s": 0}
    assert p["arenas"]["activations"]["size"] == 60
    # v 10 [0,4), w 10 [0,1), r 40 [1,4): v at 0, w at 10 (equal sizes: id
    # order), mark 20. Step 1 frees w -> [10,20), which ends at the mark: r
    # does not fit in it but grows it: r at 10, mark 50.
    g = interval_graph([("v", 0, 3, 10), ("w", 0, 0, 10), ("r", 1, 3, 40)])
    p = assert_e0(g, strategy="best_fit", alignment=1)
    assert offsets(p) == {"v": 0, "w": 10, "r": 10}
    assert p["arenas"]["activations"]["size"] == 50


def chain(n, inplace=True, size=256, **fields):
    """a0 -> a1 -> ... (float32 [size]); a{k} can take a{k-1} in place."""
    tensors = [dict({"id": f"a{k}", "shape": [size], "dtype": "float32", "role": "activation"},
                    **({"can_inplace": True} if inplace and k else {})) for k in range(n)]
    nodes = [{"id": "n0", "op": "op", "inputs": [], "outputs": ["a0"]}] + [
        {"id": f"n{k}", "op": "op", "inputs": [f"a{k - 1}"], "outputs": [f"a{k}"]} for k in range(1, n)]
    return dict({"format": "emel.graph/1", "name": "chain", "tensors": tensors, "nodes": nodes}, **fields)


@pytest.mark.parametrize("strategy,fit", CASES, ids=CASE_IDS)
def test_inplace_chain_is_one_buffer(strategy, fit):
    # a0..a3 form one in-place group: one buffer [0, 4) of 1024 bytes at 0.
    p = assert_e0(chain(4), strategy=strategy, fit=fit)
    assert offsets(p) == {"a0": 0, "a1": 0, "a2": 0, "a3": 0}
    assert [p["tensors"][f"a{k}"].get("inplace_of") for k in range(4)] == [None, "a0", "a1", "a2"]
    assert p["arenas"]["activations"]["size"] == 1024
    assert p["metrics"]["max_live"] == {"activations": 1}
    # the group counted once: never above the size (the peak of live bytes
    # counts each taker with its victim)
    assert p["metrics"]["lower_bound"] == {"activations": 1024}
    assert p["metrics"]["peak_live_bytes"] == {"activations": 2048}


@pytest.mark.parametrize("strategy,fit", CASES, ids=CASE_IDS)
def test_group_member_partner_blocks_joining(strategy, fit):
    # a1 joins a0's group; a2's only victim a1 is the group's last member, but
    # a2 must not alias a0, a member: a2 starts a buffer of its own (§1.1).
    g = chain(3)
    g["tensors"][2]["must_not_alias"] = ["a0"]
    p = assert_e0(g, strategy=strategy, fit=fit)
    assert p["tensors"]["a1"]["inplace_of"] == "a0" and "inplace_of" not in p["tensors"]["a2"]
    # buffers {a0, a1} [0,3) and {a2} [2,3), 1024 bytes each
    assert offsets(p) == {"a0": 0, "a1": 0, "a2": 1024}
    assert p["arenas"]["activations"]["size"] == 2048


@pytest.mark.parametrize("strategy,fit", CASES, ids=CASE_IDS)
def test_must_not_alias_keeps_buffers_apart_when_never_live_together(strategy, fit):
    # a [0,2), b [1,3), c [2,3), 1024 bytes each, no in-place. c could reuse
    # a's bytes, but c must not alias a: greedy puts c on top of a and b,
    # best_fit skips the free block [0,1024) that clashes with a.
    g = chain(3, inplace=False)
    assert offsets(assert_e0(g, strategy=strategy, fit=fit)) == {"a0": 0, "a1": 1024, "a2": 0}
    g["tensors"][2]["must_not_alias"] = ["a0"]
    p = assert_e0(g, strategy=strategy, fit=fit)
    assert offsets(p) == {"a0": 0, "a1": 1024, "a2": 2048}
    assert p["arenas"]["activations"]["size"] == 3072


def training_graph():
    """w (parameter) and x (input) -> y; y -> loss; gy, gw gradients."""
    def T(tid, role, **kw):
        return dict({"id": tid, "shape": [256], "dtype": "float32", "role": role}, **kw)
    tensors = [T("w", "parameter"), T("x", "input"), T("y", "activation"), T("loss", "output"),
               T("gy", "gradient"), T("gw", "gradient"), T("gk", "gradient", arena="gradients")]
    nodes = [{"id": "fwd", "op": "matmul", "inputs": ["w", "x"], "outputs": ["y"]},
             {"id": "loss_fn", "op": "loss", "inputs": ["y"], "outputs": ["loss"]},
             {"id": "bwd1", "op": "grad", "inputs": ["loss"], "outputs": ["gy", "gk"]},
             {"id": "bwd2", "op": "grad", "inputs": ["gy", "x", "gk"], "outputs": ["gw"]}]
    return {"format": "emel.graph/1", "name": "train", "tensors": tensors, "nodes": nodes}


@pytest.mark.parametrize("strategy,fit", CASES + (("tmmu", "best"),), ids=CASE_IDS + ["tmmu"])
def test_role_arenas_moves_gradients(strategy, fit):
    g = training_graph()
    separate = assert_e0(g, strategy=strategy, fit=fit, arena_layout="separate")
    assert {t: separate["tensors"][t]["arena"] for t in ("gy", "gw", "gk")} == dict.fromkeys(
        ("gy", "gw", "gk"), "gradients")
    # The default pools gradients with activations except under tmmu; gk names its own arena.
    default = assert_e0(g, strategy=strategy, fit=fit)
    pooled = "gradients" if strategy == "tmmu" else "activations"
    assert {t: default["tensors"][t]["arena"] for t in ("gy", "gw", "gk")} == {
        "gy": pooled, "gw": pooled, "gk": "gradients"}
    moved = assert_e0(g, strategy=strategy, fit=fit, role_arenas={"gradient": "activations"})
    # gy, gw move; gk keeps its own `arena` field
    assert sorted(moved["arenas"]) == ["activations", "gradients", "parameters"]
    assert {t: moved["tensors"][t]["arena"] for t in ("gy", "gw", "gk")} == {
        "gy": "activations", "gw": "activations", "gk": "gradients"}
    assert moved["metrics"]["storage_tensors"] == {"activations": 5, "gradients": 1, "parameters": 1}
    check = dict(strategy=strategy, fit=fit, role_arenas={"gradient": "activations"})
    if strategy != "tmmu":
        check_offset_plan(g, moved, "inference", **check)
    # x [0,3], y [0,1], loss [1,3] (an output), gy [2,3], gw [3,3]: four
    # tensors of 1024 bytes live at step 3
    assert moved["arenas"]["activations"]["lower_bound"] == 4 * 1024
    # without gk's own field everything but w leaves `gradients`
    g["tensors"][-1].pop("arena")
    moved = assert_e0(g, strategy=strategy, fit=fit, role_arenas={"gradient": "activations"})
    assert sorted(moved["arenas"]) == ["activations", "parameters"]
    # the parameters arena is persistent by name: under an offset strategy it
    # keeps its slot and has no method
    assert moved["arenas"]["parameters"]["slots"] == 1 and "method" not in moved["arenas"]["parameters"]
    assert moved["tensors"]["w"]["slot"] == 0


def test_role_arenas_into_a_new_arena_is_not_persistent():
    # persistence is the arena's (by name, or configured), not the role's
    g = training_graph()
    p = assert_e0(g, strategy="best_fit", role_arenas={"parameter": "weights"})
    assert p["arenas"]["weights"]["persistent"] is False and p["arenas"]["weights"]["method"] == "best_fit"
    assert "parameters" not in p["arenas"] and "slot" not in p["tensors"]["w"]
    p = assert_e0(g, strategy="best_fit", role_arenas={"parameter": "weights"},
                  arenas={"weights": {"persistent": True}})
    assert p["arenas"]["weights"]["slots"] == 1 and p["tensors"]["w"]["slot"] == 0


@pytest.mark.parametrize("role_arenas,arena", [
    ({"gradients": "activations"}, None),          # unknown role
    ({"weight": "x"}, None),
    ({"gradient": ""}, ""),                        # empty name
    ({"gradient": 3}, None),                       # not a string
    ({"gradient": None}, None),
    ({"activation": "ok", "gradient": ["x"]}, None),
    (["gradient"], None),                          # not a mapping
])
def test_bad_role_arenas(role_arenas, arena):
    g = training_graph()
    for planner in (mm.plan, ref.plan):
        with pytest.raises(PlanError) as info:
            planner(g, strategy="greedy_by_size", role_arenas=role_arenas)
        assert (info.value.code, info.value.tensor, info.value.node, info.value.arena) == (
            "INVALID_IR_SHAPES", None, None, arena), (planner, info.value)


def test_role_arenas_checked_after_alignment_and_arenas():
    g = training_graph()
    bad_roles = {"nope": "x"}
    for planner in (mm.plan, ref.plan):
        with pytest.raises(PlanError) as info:
            planner(g, alignment=3, role_arenas=bad_roles)
        assert info.value.code == "ALIGNMENT_VIOLATION"
        with pytest.raises(PlanError) as info:
            planner(g, arenas={"activations": {"alignment_bytes": 96}}, role_arenas=bad_roles)
        assert (info.value.code, info.value.arena) == ("ALIGNMENT_VIOLATION", "activations")
        with pytest.raises(PlanError) as info:   # role_arenas before the graph
            planner({"format": "bad"}, role_arenas=bad_roles)
        assert info.value.code == "INVALID_IR_SHAPES" and "role" in info.value.message


@pytest.mark.parametrize("strategy", ["auto", "optimal", "bogus", None, "GREEDY_BY_SIZE"])
def test_reference_refuses_other_strategies(strategy):
    with pytest.raises(ValueError):
        ref.plan(chain(2), strategy=strategy)


@pytest.mark.parametrize("strategy", ["tmmu", "greedy_by_size", "best_fit"])
def test_fit_must_be_best_or_first(strategy):
    for planner in (mm.plan, ref.plan):
        with pytest.raises(ValueError):
            planner(chain(2), strategy=strategy, fit="worst")


def test_fit_is_ignored_outside_greedy_by_size():
    g = chain(5, inplace=False)
    assert ref.plan(g, fit="first") == ref.plan(g)
    assert ref.plan(g, strategy="best_fit", fit="first") == ref.plan(g, strategy="best_fit")


@pytest.mark.parametrize("strategy,fit", CASES, ids=CASE_IDS)
def test_offset_capacity_error_names_the_lowest_tensor_past_it(strategy, fit):
    # x 30 [0,2), y 10 [0,4), z 40 [2,4) (as above). greedy: x, z at 0, y at
    # 40 -> capacity 45: only y ends past it. best_fit: x 0, y 30, z 40 ->
    # capacity 45: z [40,80) is the only one past it.
    g = interval_graph([("x", 0, 1, 30), ("y", 0, 3, 10), ("z", 2, 3, 40)])
    expected = "z" if strategy == "best_fit" else "y"
    for planner in (mm.plan, ref.plan):
        with pytest.raises(PlanError) as info:
            planner(g, strategy=strategy, fit=fit, alignment=1, arenas={"activations": {"capacity_bytes": 45}})
        assert (info.value.code, info.value.arena, info.value.tensor) == (
            "ARENA_TOO_SMALL", "activations", expected), info.value
    # capacity 0: every tensor ends past it; the lowest offset, ties id order: x
    for planner in (mm.plan, ref.plan):
        with pytest.raises(PlanError) as info:
            planner(g, strategy=strategy, fit=fit, alignment=1, arenas={"activations": {"capacity_bytes": 0}})
        assert info.value.tensor == "x", info.value


def test_taker_listed_before_its_same_step_victim():
    """Minimal regression: y (document first) takes x in place at step 0, where
    x (an unproduced input, born at 0) dies. Every strategy must accept it."""
    g = {"format": "emel.graph/1", "name": "order", "tensors": [
        {"id": "y", "shape": [256], "dtype": "float32", "role": "activation", "can_inplace": True},
        {"id": "x", "shape": [256], "dtype": "float32", "role": "activation"}],
        "nodes": [{"id": "n0", "op": "relu", "inputs": ["x"], "outputs": ["y"]}]}
    for strategy, fit in CASES + (("tmmu", "best"),):
        p = assert_e0(g, strategy=strategy, fit=fit)
        assert p["tensors"]["y"]["inplace_of"] == "x" and offsets(p) == {"y": 0, "x": 0}


# ---------------------------------------------------------------------------
# the model graphs (data/graphs)
# ---------------------------------------------------------------------------
MODEL_CASES = [(path, mode, strategy, fit) for path in GRAPH_FILES for mode in graphgen.MODES
               for strategy, fit in CASES]


@pytest.mark.parametrize("path,mode,strategy,fit", MODEL_CASES,
                         ids=[f"{p.stem}-{m}-{s}-{f}" for p, m, s, f in MODEL_CASES])
def test_model_graph_offset_strategies_match_reference(model_documents, path, mode, strategy, fit):
    doc = model_documents[path]
    r = assert_e0(doc, mode=mode, strategy=strategy, fit=fit)
    roles = layout_roles()                     # the default: gradients pooled with activations
    tmmu = ref.plan(doc, mode=mode, role_arenas=roles)
    check_offset_plan(doc, r, mode, strategy=strategy, fit=fit, role_arenas=roles, tmmu_plan=tmmu)


def huge_interval_graph():
    """a, b: 2^62 bytes over steps 0-4 / 1-4; c: 2^63 bytes at step 2, taken
    over in place by d (2^63 bytes, steps 3-4): whatever the placement, the
    three buffers live at step 3 need 2^64 bytes."""
    g = interval_graph([("a", 0, 4, 2**62), ("b", 1, 4, 2**62), ("c", 2, 3, 2**63),
                        ("d", 3, 4, 2**63)])
    next(t for t in g["tensors"] if t["id"] == "d")["can_inplace"] = True
    return g


# The tensor blamed is the buffer being placed when the end passes 2^64-1, by
# its first member: greedy places {c, d} (largest) and a before b; best_fit
# places by birth, so {c, d} comes last; tmmu blames the slot's first holder.
@pytest.mark.parametrize("strategy,fit,blamed", [
    ("tmmu", "best", "c"), ("greedy_by_size", "best", "b"), ("greedy_by_size", "first", "b"),
    ("best_fit", "best", "c")])
def test_placement_overflow_names_the_arena_and_the_tensor(strategy, fit, blamed):
    for planner in (mm.plan, ref.plan):
        with pytest.raises(PlanError) as info:
            planner(huge_interval_graph(), strategy=strategy, fit=fit)
        e = info.value
        assert (e.code, e.arena, e.tensor, e.node) == ("ALLOCATION_OVERFLOW", "activations", blamed, None)
        assert "2^64" in e.message


@pytest.mark.parametrize("strategy,blamed", [("auto", "c"), ("optimal", "b")])
def test_placement_overflow_of_the_searches_names_the_arena_and_the_tensor(strategy, blamed):
    # auto fails in its first heuristic (the slots: c's slot), optimal in its
    # greedy start (b, as greedy_by_size)
    with pytest.raises(PlanError) as info:
        mm.plan(huge_interval_graph(), strategy=strategy, time_budget_ms=5)
    assert (info.value.code, info.value.arena, info.value.tensor) == ("ALLOCATION_OVERFLOW", "activations",
                                                                     blamed)


@pytest.mark.parametrize("strategy", ["tmmu", "greedy_by_size", "best_fit", "auto", "optimal"])
def test_place_overflow_names_the_row(strategy):
    size = np.array([2**63, 2**62, 2**62], dtype=np.uint64)
    with pytest.raises(PlanError) as info:
        mm.place([0, 0, 1], [2, 2, 2], size, strategy, time_budget_ms=5)
    assert (info.value.code, info.value.tensor, info.value.arena) == ("ALLOCATION_OVERFLOW", "2", None)
