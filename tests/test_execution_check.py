"""verify_execution over real arena memory: every model graph (data/graphs) x strategy x
mode, random hypothesis graphs, and the pooling allocator's statistics and
its replay of the model graphs' allocate/free traces.

The check is a pure function of the graph and the plan arrays (offsets,
lifetimes, arenas, in-place pairs), so when two strategies or modes give one
graph byte-identical plans the walk runs once for all of them; every case is
still planned and compared (90 cases, 32 distinct plans on the model graphs).
"""

import hashlib
import json

import numpy as np
import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

import emel.memory as mm
from emel.memory import pooling

from graphgen import graphs, plan_kwargs

from repo_data import GRAPH_FILES as FILES, graph_path

BUDGET_MS = 20  # auto / optimal: small, deterministic work budgets
BYTES_CAP = 8 << 20  # random graphs above this are refused by the budget (and skipped)


def plan_signature(plan):
    core = plan._core
    h = hashlib.sha256()
    for arr in (plan.offsets, plan.births, plan.deaths, core.arena_of, core.inplace_of,
                np.asarray(plan._arena_sizes, dtype=np.uint64)):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_model_graph_every_strategy_and_mode_executes_without_clobbering(path):
    graph = mm.load_graph(path)
    verified, cases = {}, 0
    for mode in mm.MODES:
        for strategy in mm.STRATEGIES:
            plan = mm.plan(graph, mode=mode, strategy=strategy, time_budget_ms=BUDGET_MS)
            cases += 1
            sig = plan_signature(plan)
            if sig not in verified:
                arenas = mm.Arenas(plan, zero=False)
                report = mm.verify_execution(plan, arenas)
                assert report.steps == len(graph.nodes)
                # Every storage tensor of non-zero size is written exactly once.
                storage = [t for t in graph.tensors if "view_of" not in t]
                assert report.tensors_written == sum(1 for t in storage
                                                     if plan.tensors[t["id"]].size > 0)
                assert report.bytes_checked > 0
                verified[sig] = report
                del arenas
    assert cases == len(mm.MODES) * len(mm.STRATEGIES) and verified


def test_model_graph_corruption_of_each_strategy_is_caught():
    """On one graph and every strategy, moving an activation onto a live one
    is caught by the walk (the self-check agrees it is a collision)."""
    graph = mm.load_graph(graph_path("resnet18-inference"))
    views = {t["view_of"]["base"] for t in graph.tensors if "view_of" in t}
    reads = {}
    for step, node in enumerate(graph.nodes):
        for tid in node["inputs"]:
            reads.setdefault(tid, []).append(step)
    for strategy in mm.STRATEGIES:
        plan = mm.plan(graph, strategy=strategy, time_budget_ms=BUDGET_MS)
        t = plan.tensors
        acts = [k for k, v in t.items() if v.view_of is None and v.arena == "activations"
                and k not in views and v.size > 0 and k in reads]
        victim, intruder = next(
            (a, b) for a in acts for b in acts
            if t[a].birth < t[b].birth and any(s > t[b].birth for s in reads[a])
            and t[b].size <= t[a].size and t[a].offset != t[b].offset)
        plan.offsets[plan.tensor_ids.index(intruder)] = t[victim].offset
        with pytest.raises(mm.PlanError) as e:
            mm.verify_execution(plan, mm.Arenas(plan, zero=False))
        assert (e.value.tensor, e.value.overwritten_by) == (victim, intruder), strategy
        with pytest.raises(mm.PlanError, match="ADDRESS_COLLISION"):
            plan.verify()


# -- pooling allocator ------------------------------------------------------------
def test_exact_pool_reuses_only_equal_sizes_and_caps_each_size():
    pool = mm.PoolingAllocator("exact", max_per_size=2, alignment=64)
    a, b, c = pool.allocate(100), pool.allocate(100), pool.allocate(100)
    assert len({a, b, c}) == 3 and all(x % 64 == 0 for x in (a, b, c))
    for x in (a, b, c):
        pool.free(x)
    s = pool.stats
    assert (s["allocated"], s["pooled"], s["released"], s["bytes_in_use"]) == (3, 2, 1, 0)
    assert s["peak_bytes"] == 3 * 128
    d = pool.allocate(128)          # same aligned size: reused, last freed first
    assert d == b and pool.stats["reused"] == 1
    e = pool.allocate(64)           # another size: fresh
    assert e not in (a, b, c) and pool.stats["allocated"] == 4
    assert pool.stats["bytes_in_use"] == 128 + 64
    with pytest.raises(ValueError, match="not a live allocation"):
        pool.free(a)                # went back to the pool already (or the host)
    pool.trim()
    assert pool.stats["pooled"] == 0 and pool.stats["bytes_pooled"] == 0


def test_best_fit_pool_splits_and_coalesces():
    pool = mm.PoolingAllocator("best_fit", alignment=64)
    big = pool.allocate(1024)
    pool.free(big)
    x = pool.allocate(256)          # split the free 1024-byte block
    y = pool.allocate(256)
    assert (x, y) == (big, big + 256)
    s = pool.stats
    assert (s["allocated"], s["reused"], s["pooled"], s["bytes_pooled"]) == (1, 2, 1, 512)
    z = pool.allocate(600)          # nothing free fits 640 bytes: a fresh chunk
    assert pool.stats["allocated"] == 2
    pool.free(x)
    pool.free(y)                    # x, y and the 512-byte rest coalesce into one block
    s = pool.stats
    assert (s["pooled"], s["bytes_pooled"]) == (1, 1024)
    assert pool.allocate(1000) == big  # the whole chunk again
    pool.free(z)
    pool.trim()                     # z's chunk is fully free: back to the host
    assert pool.stats["released"] == 1 and pool.stats["peak_bytes"] == 1024 + 640


def test_pool_arguments():
    with pytest.raises(ValueError, match="policy"):
        mm.PoolingAllocator("buddy")
    with pytest.raises(ValueError, match="alignment"):
        mm.PoolingAllocator("exact", alignment=48)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_pool_replay_of_model_graphs(path):
    """The traces of the model graphs: best fit makes at most half the fresh
    allocations of one-allocation-per-tensor on every graph (the exact-size
    pools on all graphs together), and both give back every buffer."""
    doc = json.loads(path.read_text())
    plan = mm.plan(doc)
    sizes, is_alloc, ids = pooling.allocation_trace(plan)
    assert len(is_alloc) == 2 * len(sizes) and is_alloc.sum() == len(sizes)
    for policy in pooling.POLICIES:
        r = pooling.replay(plan, policy)
        assert r["requests"] == r["tensors"] == len(sizes)
        assert r["allocated"] + r["reused"] == r["requests"] and r["bytes_in_use"] == 0
        if policy == "best_fit":
            assert r["allocated"] <= r["tensors"] / 2, r
        # never less than the live bytes at the busiest step
        live_peak = max(plan.metrics["lower_bound"][n] for n, a in plan.arenas.items()
                        if not a.persistent)
        assert r["peak_bytes"] >= live_peak


def test_exact_pools_halve_fresh_allocations_over_the_model_graphs():
    fresh = tensors = 0
    for path in FILES:
        r = pooling.replay(mm.plan(json.loads(path.read_text())), "exact")
        fresh += r["allocated"]
        tensors += r["tensors"]
    assert fresh <= tensors / 2


def _intruder_pair(doc, plan):
    """(victim, intruder, first read): a storage tensor moved onto a live one.

    The intruder is written while the victim holds its bytes and fits inside
    it, and neither has views; the victim is read by a node after the intruder
    is written. None when the graph has no such pair.
    """
    t = plan.tensors
    viewed = {x["view_of"]["base"] for x in doc["tensors"] if x.get("view_of")}
    order = plan.graph.execution_order or [n["id"] for n in plan.graph.nodes]
    nodes = {n["id"]: n for n in plan.graph.nodes}
    reads, written = {}, {}  # written: the step a tensor's bytes are written (0: at the start)
    for step, nid in enumerate(order):
        for tid in nodes[nid]["inputs"]:
            reads.setdefault(tid, []).append(step)
        for tid in nodes[nid]["outputs"]:
            written[tid] = step
    storage = sorted(k for k, v in t.items() if v.view_of is None and k not in viewed)
    for a in storage:
        for b in storage:
            ta, tb = t[a], t[b]
            if a == b or ta.arena != tb.arena or b not in written:
                continue
            # b written while a holds its bytes, into a's range
            if not written.get(a, 0) < written[b] <= ta.death or not 8 <= tb.size <= ta.size:
                continue
            later = [s for s in reads.get(a, ()) if s > written[b]]
            if later:
                return a, b, min(later)
    return None


@given(graphs(max_nodes=60), plan_kwargs(), st.sampled_from(mm.STRATEGIES), st.integers(0, 2**64 - 1))
def test_random_graphs_execute_and_a_corrupted_offset_is_caught(doc, kwargs, strategy, seed):
    """Every random plan executes without clobbering; then, as a mutation
    test, one tensor is moved onto a live one and the walk must name the
    victim, the intruder and the step of the victim's next read."""
    plan = mm.plan(doc, strategy=strategy, time_budget_ms=5, **kwargs)
    try:
        arenas = mm.Arenas(plan, zero=False, memory_bytes_budget=BYTES_CAP, pattern_seed=seed)
    except mm.PlanError as e:
        assert e.code == "QUOTA_EXCEEDED" and plan.total_bytes > BYTES_CAP
        assume(False)
    report = mm.verify_execution(plan, arenas)
    assert report.steps == len(doc["nodes"])
    assert arenas.ledger.bytes_allocated == plan.total_bytes

    found = _intruder_pair(doc, plan)
    event("mutated" if found else "no pair to mutate")
    if found is None:
        return
    victim, intruder, first_read = found
    i = plan.tensor_ids.index(intruder)
    if plan.offsets[i] == plan.tensors[victim].offset:
        event("pair already shares an offset")
        return  # already there: a legal in-place pair, nothing moved
    plan.offsets[i] = plan.tensors[victim].offset
    try:
        arenas.apply(plan, zero=False)
    except mm.PlanError as e:  # the intruder needs a stricter alignment than the spot has
        assert e.code == "ALIGNMENT_VIOLATION" and e.tensor == intruder
        event("refused: alignment")
        return
    with pytest.raises(mm.PlanError) as e:
        mm.verify_execution(plan, arenas)
    err = e.value
    assert err.code == "ADDRESS_COLLISION"
    assert (err.tensor, err.step, err.overwritten_by) == (victim, first_read, intruder)
    assert err.byte_offset < plan.tensors[intruder].size
