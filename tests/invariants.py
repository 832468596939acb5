"""An independent checker of ``emel.plan/1`` documents.

Written from ``docs/algorithm.md``, ``docs/formats.md``, ``graph-format.md``
and ``plan-format.md`` only: it imports neither the reference nor the core.
``check_plan(graph, plan, mode, arenas=None, alignment=None)`` raises
``AssertionError`` (with a message naming the tensor / arena) on the first
violated invariant:

* every tensor has an entry with exactly the documented keys; arenas, sizes;
* births / deaths recomputed from the lifetime rules (graph-format.md,
  algorithm.md §2) for every storage tensor, per mode;
* views: ``view_of`` is the root, ``offset`` = root offset + cumulative byte
  offset, size is the view's span;
* storage offsets aligned to ``max(arena alignment, tensor alignment,
  alignments of the views rooted at it)``; views with an alignment too;
* ``offset + size <= arena size``; arena size a multiple of its alignment;
* no two storage tensors of one arena with intersecting ``[birth, death]``
  overlap in bytes unless they are a legal in-place pair (the taker names the
  victim in ``inplace_of``, is born at the victim's death step at the same
  offset, and every eligibility rule of algorithm.md §4 holds);
* ``must_not_alias`` pairs never overlap in bytes and never share a slot;
* slots: numbered densely from 0; persistent arenas: k-th storage tensor in
  id order in slot k, offsets increasing in id order, no overlap; the layout
  of §5 recomputed from the plan's own slot numbers;
* non-persistent arenas with no ``must_not_alias`` pair touching them:
  ``slots == max_live`` (max_live recomputed from the plan's lifetimes,
  counting each in-place pair made at a step once);
* metrics (lower bound, max_live, storage tensor counts, ratios, totals)
  recomputed.
"""

from __future__ import annotations

from bisect import bisect_left, insort

__all__ = ["check_plan", "analyze_graph", "plan_diff", "DTYPE_SIZES"]

DTYPE_SIZES = {
    "float64": 8, "int64": 8,
    "float32": 4, "int32": 4,
    "float16": 2, "bfloat16": 2, "int16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1, "uint8": 1, "bool": 1,
}
PERSISTENT_ROLES = ("parameter", "optimizer_state")
VICTIM_FORBIDDEN_ROLES = ("input", "output", "parameter", "optimizer_state")
DEFAULT_ARENA = {
    "parameter": "parameters", "optimizer_state": "parameters",
    "gradient": "gradients",
    "input": "activations", "activation": "activations", "output": "activations",
}
STORAGE_KEYS = {"arena", "offset", "size", "slot", "birth", "death"}
VIEW_KEYS = {"arena", "offset", "size", "view_of"}
ARENA_KEYS = {"size", "alignment", "slots", "lower_bound", "page_size", "persistent"}
METRIC_MAPS = (
    "peak_logical_slots", "peak_physical_bytes", "lower_bound", "peak_live_bytes", "max_live",
    "storage_tensors", "memory_reuse_ratio", "internal_fragmentation_ratio",
)


def _opt(d, key, default=None):
    """Optional field: absent and null are the same."""
    v = d.get(key)
    return default if v is None else v


def _align_up(x, a):
    return -(-x // a) * a


def _size(t):
    nb = _opt(t, "nbytes")
    if nb is not None:
        return nb
    n = DTYPE_SIZES[t["dtype"]]
    for d in t["shape"]:
        n *= d
    return n


class GraphFacts:
    """Everything the lifetime rules say about a (valid) graph."""


def analyze_graph(graph, mode):
    """Recompute sizes, roots, arenas, steps, births and deaths for ``mode``."""
    f = GraphFacts()
    tensors = graph["tensors"]
    nodes = graph["nodes"]
    by_id = {t["id"]: t for t in tensors}
    f.by_id = by_id
    f.ids = [t["id"] for t in tensors]
    f.size = {tid: _size(t) for tid, t in by_id.items()}
    f.is_view = {tid: _opt(t, "view_of") is not None for tid, t in by_id.items()}

    # roots and root offsets (iteratively, any depth)
    f.root, f.root_off = {}, {}
    for tid in f.ids:
        cur, off = tid, 0
        while f.is_view[cur]:
            vo = by_id[cur]["view_of"]
            off += _opt(vo, "byte_offset", 0)
            cur = vo["base"]
        f.root[tid], f.root_off[tid] = cur, off
    f.storage = [tid for tid in f.ids if not f.is_view[tid]]
    f.views_of = {tid: [] for tid in f.storage}
    for tid in f.ids:
        if f.is_view[tid]:
            f.views_of[f.root[tid]].append(tid)

    # steps
    order = _opt(graph, "execution_order")
    node_by_id = {n["id"]: n for n in nodes}
    order = list(order) if order is not None else [n["id"] for n in nodes]
    f.order = order
    f.n = len(order)
    f.last = max(f.n - 1, 0)
    f.step_inputs = [list(_opt(node_by_id[nid], "inputs", [])) for nid in order]
    f.step_outputs = [list(_opt(node_by_id[nid], "outputs", [])) for nid in order]
    f.prod = {}
    for s, outs in enumerate(f.step_outputs):
        for o in outs:
            f.prod[o] = s

    # liveness of storage tensors
    last_touch = {}
    for s in range(f.n):
        for tid in f.step_inputs[s] + f.step_outputs[s]:
            r = f.root[tid]
            last_touch[r] = s   # s increases, so this is the last touch
    listed_outputs = set(_opt(graph, "outputs", []))
    f.is_output = set()
    for tid in f.ids:
        if by_id[tid]["role"] == "output" or tid in listed_outputs:
            f.is_output.add(f.root[tid])
    f.saved = set()
    for tid in f.ids:
        if _opt(by_id[tid], "saved_for_backward", False):
            f.saved.add(f.root[tid])
    f.birth, f.death = {}, {}
    for tid in f.storage:
        t = by_id[tid]
        b = f.prod.get(tid, 0)
        d = max(b, last_touch.get(tid, b))
        if t["role"] in PERSISTENT_ROLES:
            b, d = 0, f.last
        if tid in f.is_output:
            d = f.last
        if mode == "forward" and tid in f.saved:
            d = f.last
        f.birth[tid], f.death[tid] = b, d

    # arenas
    f.arena = {}
    for tid in f.storage:
        t = by_id[tid]
        f.arena[tid] = _opt(t, "arena") or DEFAULT_ARENA[t["role"]]
    for tid in f.ids:
        if f.is_view[tid]:
            f.arena[tid] = f.arena[f.root[tid]]

    # must_not_alias pairs (as listed and resolved to roots)
    f.mna_pairs = []
    for tid in f.ids:
        for m in _opt(by_id[tid], "must_not_alias", []):
            f.mna_pairs.append((tid, m))
    f.mna_roots = set()
    for a, b in f.mna_pairs:
        ra, rb = f.root[a], f.root[b]
        if ra != rb:
            f.mna_roots.add((ra, rb))
            f.mna_roots.add((rb, ra))
    return f


def _fmt(x):
    return repr(x)


def check_plan(graph, plan, mode=None, arenas=None, alignment=None, *, strategy="tmmu",
               check_config=True):
    """Assert every documented invariant of ``plan`` for ``graph`` in ``mode``.

    ``arenas`` / ``alignment`` are the kwargs the plan was made with (None:
    the defaults); with ``check_config`` the arena configuration echoed in the
    plan (alignment, page_size, persistent, capacity_bytes, the set of arenas)
    is checked against them too.
    """
    if mode is None:
        mode = plan.get("mode")
    assert mode in ("inference", "forward", "backward"), mode
    f = analyze_graph(graph, mode)
    config = dict(arenas or {})

    # ---- top level ------------------------------------------------------
    assert plan.get("format") == "emel.plan/1", plan.get("format")
    assert plan.get("graph") == _opt(graph, "name", ""), (plan.get("graph"), graph.get("name"))
    assert plan.get("mode") == mode, (plan.get("mode"), mode)
    assert plan.get("strategy") == strategy, plan.get("strategy")
    assert plan.get("steps") == f.n, ("steps", plan.get("steps"), f.n)
    determinism = {"hashes", "replay_token", "rank", "world_size"}
    assert set(plan) - determinism == {"format", "graph", "mode", "strategy", "steps", "arenas",
                                       "tensors", "metrics"}, ("top-level keys", sorted(plan))
    # docs/determinism.md: all four fields or none (hand-written fixtures);
    # only their shapes are checked here -- tests/test_determinism.py
    # recomputes the hashes, and mutated plans must be caught by the checks
    # below, not by a stale hash.
    if determinism & set(plan):
        assert determinism <= set(plan), ("determinism keys", sorted(plan))
        hex64 = lambda x: isinstance(x, str) and len(x) == 64 and set(x) <= set("0123456789abcdef")  # noqa: E731
        assert sorted(plan["hashes"]) == ["arena_config_hash", "execution_order_hash", "ir_hash",
                                          "plan_hash", "shard_spec_hash"], ("hashes", plan["hashes"])
        assert all(hex64(v) for v in plan["hashes"].values()), ("hashes", plan["hashes"])
        assert hex64(plan["replay_token"]), ("replay_token", plan["replay_token"])
        assert 0 <= plan["rank"] < plan["world_size"], ("rank", plan["rank"], plan["world_size"])
    P = plan["tensors"]
    A = plan["arenas"]

    # ---- every tensor has an entry --------------------------------------
    assert set(P) == set(f.ids), (
        "tensor entries", sorted(set(f.ids) - set(P))[:5], sorted(set(P) - set(f.ids))[:5])

    # ---- arenas present, configuration echoed ----------------------------
    expected_arenas = {f.arena[t] for t in f.storage}
    if check_config:
        expected_arenas |= set(config)
        assert set(A) == expected_arenas, ("arenas", sorted(A), sorted(expected_arenas))
    else:
        assert expected_arenas <= set(A), ("arenas", sorted(A), sorted(expected_arenas))
    for name, a in A.items():
        keys = set(a)
        assert ARENA_KEYS <= keys <= ARENA_KEYS | {"capacity_bytes"}, (name, sorted(keys))
        cfg = config.get(name, {})
        exp_align = cfg.get("alignment_bytes", alignment if alignment is not None else 128)
        if check_config:
            assert a["alignment"] == exp_align, ("arena alignment", name, a["alignment"], exp_align)
            assert a["page_size"] == cfg.get("page_size", 4096), ("page_size", name)
            assert a["persistent"] == cfg.get("persistent", name == "parameters"), ("persistent", name)
            if "capacity_bytes" in cfg:
                assert a.get("capacity_bytes") == cfg["capacity_bytes"], ("capacity_bytes", name)
            else:
                assert "capacity_bytes" not in a, ("capacity_bytes", name)
        al = a["alignment"]
        assert al >= 1 and al & (al - 1) == 0, ("arena alignment not a power of two", name, al)
        assert a["size"] % al == 0, ("arena size not a multiple of its alignment", name, a["size"], al)
        if "capacity_bytes" in a:
            assert a["size"] <= a["capacity_bytes"], ("capacity exceeded", name)

    # ---- storage entries: keys, arena, size, lifetimes --------------------
    for tid in f.storage:
        e = P[tid]
        keys = set(e)
        assert STORAGE_KEYS <= keys <= STORAGE_KEYS | {"inplace_of"}, (tid, sorted(keys))
        if "inplace_of" in e:
            assert isinstance(e["inplace_of"], str), ("inplace_of must be an id when present", tid)
        assert e["arena"] == f.arena[tid], ("arena", tid, e["arena"], f.arena[tid])
        assert e["size"] == f.size[tid], ("size", tid, e["size"], f.size[tid])
        assert e["birth"] == f.birth[tid], ("birth", tid, e["birth"], f.birth[tid])
        assert e["death"] == f.death[tid], ("death", tid, e["death"], f.death[tid])
        for k in ("offset", "slot", "birth", "death", "size"):
            assert isinstance(e[k], int) and not isinstance(e[k], bool) and e[k] >= 0, (tid, k, e[k])

    # ---- views --------------------------------------------------------------
    for tid in f.ids:
        if not f.is_view[tid]:
            continue
        e = P[tid]
        assert set(e) == VIEW_KEYS, (tid, sorted(e))
        r = f.root[tid]
        assert e["view_of"] == r, ("view_of must be the root", tid, e["view_of"], r)
        assert e["arena"] == f.arena[r], ("view arena", tid, e["arena"], f.arena[r])
        assert e["size"] == f.size[tid], ("view size", tid, e["size"], f.size[tid])
        assert e["offset"] == P[r]["offset"] + f.root_off[tid], (
            "view offset", tid, e["offset"], P[r]["offset"], f.root_off[tid])
        va = _opt(f.by_id[tid], "alignment")
        if va is not None:
            assert e["offset"] % va == 0, ("view misaligned", tid, e["offset"], va)

    # ---- alignment and bounds -----------------------------------------------
    eff_align = {}
    for tid in f.storage:
        e = P[tid]
        a = max(A[e["arena"]]["alignment"], _opt(f.by_id[tid], "alignment", 1),
                max((_opt(f.by_id[v], "alignment", 1) for v in f.views_of[tid]), default=1))
        eff_align[tid] = a
        assert e["offset"] % a == 0, ("misaligned", tid, e["offset"], a)
    for tid in f.ids:
        e = P[tid]
        assert e["offset"] + e["size"] <= A[e["arena"]]["size"], (
            "past the arena end", tid, e["offset"], e["size"], A[e["arena"]]["size"])

    # ---- in-place pairs: every eligibility rule --------------------------
    victims_seen = {}
    for tid in f.storage:
        v = P[tid].get("inplace_of")
        if v is None:
            continue
        _check_inplace(f, P, A, mode, tid, v)
        assert v not in victims_seen, ("victim taken twice", v, victims_seen.get(v), tid)
        victims_seen[v] = tid

    # ---- per arena: overlap, slots, layout, metrics ------------------------
    by_arena = {name: [] for name in A}
    for tid in f.storage:
        by_arena[P[tid]["arena"]].append(tid)
    mna_arenas = set()
    for a, b in f.mna_pairs:
        mna_arenas.add(f.arena[a])
        mna_arenas.add(f.arena[b])
    M = plan["metrics"]
    assert set(M) == set(METRIC_MAPS) | {"total_bytes", "total_lower_bound"}, ("metrics keys", sorted(M))
    for key in METRIC_MAPS:
        assert set(M[key]) == set(A), ("metrics arenas", key, sorted(M[key]), sorted(A))
    for name, members in by_arena.items():
        _check_arena(f, P, A, M, name, members, eff_align, name in mna_arenas)
    assert M["total_bytes"] == sum(a["size"] for a in A.values()), "total_bytes"
    assert M["total_lower_bound"] == sum(a["lower_bound"] for a in A.values()), "total_lower_bound"

    # ---- must_not_alias: never overlapping bytes, never one slot ------------
    for a, b in f.mna_pairs:
        ea, eb = P[a], P[b]
        if ea["arena"] != eb["arena"]:
            continue
        assert not _bytes_overlap(ea["offset"], ea["size"], eb["offset"], eb["size"]), (
            "must_not_alias pair overlaps", a, b)
    for ra, rb in f.mna_roots:
        if P[ra]["arena"] == P[rb]["arena"]:
            assert P[ra]["slot"] != P[rb]["slot"], ("must_not_alias pair shares a slot", ra, rb)
    return True


def _bytes_overlap(o1, s1, o2, s2):
    return s1 > 0 and s2 > 0 and o1 < o2 + s2 and o2 < o1 + s1


def _check_inplace(f, P, A, mode, t, i):
    """``t`` says it took the storage of ``i`` in place."""
    assert i in f.by_id and not f.is_view.get(i, True), ("inplace_of must be a storage tensor", t, i)
    tt = f.by_id[t]
    assert i != t, ("in place of itself", t)
    assert _opt(tt, "can_inplace", False), ("taker without can_inplace", t, i)
    assert t in f.prod, ("taker not produced by a node", t, i)
    assert tt["role"] not in PERSISTENT_ROLES, ("persistent taker", t, i)
    s = f.prod[t]
    assert P[t]["birth"] == s, ("taker birth", t)
    assert i in f.step_inputs[s], ("victim is not an input of the taker's producer", t, i)
    assert P[i]["arena"] == P[t]["arena"], ("in-place across arenas", t, i)
    assert not A[P[t]["arena"]]["persistent"], ("in-place in a persistent arena", t, i)
    assert P[i]["death"] == s, ("victim does not die at the taker's birth", t, i, P[i]["death"], s)
    assert P[i]["offset"] == P[t]["offset"], ("in-place pair at different offsets", t, i)
    assert P[i]["slot"] == P[t]["slot"], ("in-place pair in different slots", t, i)
    assert f.by_id[i]["role"] not in VICTIM_FORBIDDEN_ROLES, ("victim role", t, i, f.by_id[i]["role"])
    assert i not in f.is_output, ("victim is an output", t, i)
    if mode in ("forward", "backward"):
        assert i not in f.saved, ("victim is saved for backward", t, i, mode)
    touched = set(f.step_inputs[s]) | set(f.step_outputs[s])
    for v in f.views_of[i]:
        assert v not in touched, ("victim has a live alias at the step", t, i, v)
    assert f.size[i] >= f.size[t], ("victim smaller than taker", t, i)
    assert (t, i) not in f.mna_roots, ("in-place must_not_alias pair", t, i)


def _check_arena(f, P, A, M, name, members, eff_align, has_mna):
    a = A[name]
    n_steps = f.last + 1

    # slots are dense: 0..slots-1, each holds a tensor
    slots = a["slots"]
    used = {P[t]["slot"] for t in members}
    assert used == set(range(slots)), ("slots not dense", name, slots, sorted(used)[:10])

    # layout recomputed from the plan's own slots (algorithm.md §5)
    slot_size = [0] * slots
    slot_align = [1] * slots
    for t in members:
        k = P[t]["slot"]
        slot_size[k] = max(slot_size[k], _align_up(f.size[t], eff_align[t]))
        slot_align[k] = max(slot_align[k], eff_align[t])
    offs = []
    end = 0
    for k in range(slots):
        o = 0 if k == 0 else _align_up(end, slot_align[k])
        offs.append(o)
        end = o + slot_size[k]
    exp_size = _align_up(end, a["alignment"]) if slots else 0
    for t in members:
        assert P[t]["offset"] == offs[P[t]["slot"]], (
            "offset is not its slot's", name, t, P[t]["offset"], offs[P[t]["slot"]])
    assert a["size"] == exp_size, ("arena size", name, a["size"], exp_size)

    # persistent arenas: id order, one tensor per slot, increasing offsets
    if a["persistent"]:
        ordered = sorted(members)
        for k, t in enumerate(ordered):
            assert P[t]["slot"] == k, ("persistent slot not in id order", name, t, P[t]["slot"], k)
            assert "inplace_of" not in P[t], ("in place in a persistent arena", t)
        for x, y in zip(ordered, ordered[1:]):
            assert P[x]["offset"] <= P[y]["offset"], ("persistent offsets not increasing", x, y)
            assert P[x]["offset"] + P[x]["size"] <= P[y]["offset"] or P[y]["size"] == 0 or P[x]["size"] == 0, (
                "persistent tensors overlap", x, y)

    # no two live-together storage tensors share bytes (except in place)
    check_no_overlap(f, P, name, members, n_steps)

    # live counts: max_live, the peak of live bytes, and the lower bound,
    # which counts the bytes an in-place pair shares once (the victim's
    # bytes are the taker's, at the same offset, while both are live)
    cnt = [0] * (n_steps + 1)
    byt = [0] * (n_steps + 1)
    shared = [0] * (n_steps + 1)
    for t in members:
        b, d = P[t]["birth"], P[t]["death"]
        cnt[b] += 1
        cnt[d + 1] -= 1
        byt[b] += f.size[t]
        byt[d + 1] -= f.size[t]
        v = P[t].get("inplace_of")
        if v is not None:
            cnt[b] -= 1          # the pair made at step b counts once
            cnt[b + 1] += 1
            first, last = max(b, P[v]["birth"]), min(d, P[v]["death"])
            if first <= last:
                both = min(f.size[t], f.size[v])
                shared[first] += both
                shared[last + 1] -= both
    max_live = lower = peak = 0
    c = s = sh = 0
    for k in range(n_steps):
        c += cnt[k]
        s += byt[k]
        sh += shared[k]
        max_live = max(max_live, c)
        peak = max(peak, s)
        lower = max(lower, s - sh)
    assert a["lower_bound"] == lower, ("lower_bound", name, a["lower_bound"], lower)
    assert M["lower_bound"][name] == lower, ("metrics.lower_bound", name)
    assert M["peak_live_bytes"][name] == peak, ("metrics.peak_live_bytes", name)
    assert a["size"] >= lower, ("size below the lower bound", name, a["size"], lower)
    assert M["max_live"][name] == max_live, ("metrics.max_live", name, M["max_live"][name], max_live)
    if a["persistent"]:
        assert slots == len(members), ("persistent slots", name, slots, len(members))
    elif not has_mna:
        assert slots == max_live, ("slots != max_live", name, slots, max_live)
    else:
        assert slots >= max_live, ("slots < max_live", name, slots, max_live)

    # the other metrics
    assert M["peak_logical_slots"][name] == slots, ("peak_logical_slots", name)
    assert M["peak_physical_bytes"][name] == a["size"], ("peak_physical_bytes", name)
    assert M["storage_tensors"][name] == len(members), ("storage_tensors", name)
    reuse = 1.0 - float(slots) / float(len(members)) if members else 0.0
    assert M["memory_reuse_ratio"][name] == reuse, ("memory_reuse_ratio", name, M["memory_reuse_ratio"][name], reuse)
    fa = fb = 0
    for t in members:
        life = P[t]["death"] - P[t]["birth"] + 1
        fa += f.size[t] * life
        fb += slot_size[P[t]["slot"]] * life
    frag = 1.0 - float(fa) / float(fb) if fb else 0.0
    assert M["internal_fragmentation_ratio"][name] == frag, (
        "internal_fragmentation_ratio", name, M["internal_fragmentation_ratio"][name], frag)


def check_no_overlap(f, P, name, members, n_steps):
    """The plans' one overlap check (tests/test_strategies_e0.py uses it too). Sweep the steps; every tensor born at a step is checked against every
    tensor live at that step (two inclusive intervals intersect iff both are
    live at the later birth)."""
    born = [[] for _ in range(n_steps)]
    dies = [[] for _ in range(n_steps)]
    for t in members:
        if f.size[t] == 0:
            continue   # zero-size ranges never intersect
        born[P[t]["birth"]].append(t)
        dies[P[t]["death"]].append(t)
    live = []          # sorted (offset, id)
    max_size = 0
    for s in range(n_steps):
        for t in born[s]:
            insort(live, (P[t]["offset"], t))
            max_size = max(max_size, f.size[t])
        for t in born[s]:
            o, z = P[t]["offset"], f.size[t]
            # candidates start in [o - max_size, o + z)
            i = bisect_left(live, (o - max_size, ""))
            while i < len(live) and live[i][0] < o + z:
                uo, u = live[i]
                i += 1
                if u == t or not _bytes_overlap(o, z, uo, f.size[u]):
                    continue
                if _legal_inplace(P, t, u, s) or _legal_inplace(P, u, t, s):
                    continue
                raise AssertionError((
                    "storage tensors overlap while both live", name, t, u,
                    {"offset": o, "size": z, "birth": P[t]["birth"], "death": P[t]["death"]},
                    {"offset": uo, "size": f.size[u], "birth": P[u]["birth"], "death": P[u]["death"]},
                    "step", s))
        for t in dies[s]:
            live.remove((P[t]["offset"], t))


def _legal_inplace(P, taker, victim, s):
    e = P[taker]
    return (e.get("inplace_of") == victim and e["birth"] == s and P[victim]["death"] == s
            and e["offset"] == P[victim]["offset"])


def plan_diff(a, b, path="", out=None, limit=25):
    """Paths where two JSON values differ, core = a and reference = b (at most
    ``limit``): the failure message of the E0 tests."""
    if out is None:
        out = []
    if len(out) >= limit:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in a:
                out.append(f"{p}: only in reference = {b[k]!r}")
            elif k not in b:
                out.append(f"{p}: only in core = {a[k]!r}")
            else:
                plan_diff(a[k], b[k], p, out, limit)
            if len(out) >= limit:
                break
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            plan_diff(x, y, f"{path}[{i}]", out, limit)
    elif a != b or type(a) is not type(b):
        out.append(f"{path}: core={a!r} reference={b!r}")
    return out
