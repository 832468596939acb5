"""The greedy pass on large traces (docs/strategies.md §2, issue 11 scale), and
threads in the placement searches.

Past 16,384 buffers the core places with its length-class index, a bucket
sort of the conflicts and several threads. Everything here checks that these
give exactly the offsets of the specification: against an independent NumPy
implementation of §2 (a plain scan of all placed buffers), and across thread
counts, which must change nothing, not even the work charged."""

import json
import subprocess
import sys

import numpy as np
import pytest

import emel.memory as mm
from emel.memory import _core

import synthetic_traces  # bench/ is on pytest's pythonpath (pyproject.toml)
from repo_data import CHALLENGING, child_env


def greedy_spec(lower, upper, size, alignment=1, fit="best"):
    """§2 written out with NumPy: biggest first (ties: earlier, longer, row),
    each into the tightest (first fit: lowest) gap among the placed buffers
    it lives with, found by a scan of every placed buffer."""
    lower = np.asarray(lower, np.int64)
    upper = np.asarray(upper, np.int64)
    size = -(-np.asarray(size, np.int64) // alignment) * alignment
    n = len(size)
    order = np.lexsort((np.arange(n), -(upper - lower), lower, -size))
    offset = np.zeros(n, np.int64)
    placed = np.zeros(n, bool)
    for x in order:
        lo, up, s = lower[x], upper[x], size[x]
        near = np.flatnonzero(placed & (lower < up) & (upper > lo)) if lo < up else np.empty(0, np.int64)
        starts = offset[near]
        ends = starts + size[near]
        by_offset = np.lexsort((ends, starts))
        cursor, chosen, best_gap = 0, None, None
        for o, e in zip(starts[by_offset].tolist(), ends[by_offset].tolist()):
            start = -(-cursor // alignment) * alignment
            if start + s <= o and (best_gap is None or o - cursor < best_gap):
                chosen, best_gap = start, o - cursor
                if fit == "first":
                    break
            cursor = max(cursor, e)
        offset[x] = -(-cursor // alignment) * alignment if chosen is None else chosen
        placed[x] = lo < up  # a never-live row holds no bytes at any instant (§6)
    return offset


def peak_spec(lower, upper, size):
    """The peak of live bytes: a sweep over every start and end, ends first
    at one instant (half-open intervals), never-live rows left out."""
    lower, upper, size = (np.asarray(v, np.int64) for v in (lower, upper, size))
    live = lower < upper
    times = np.concatenate([lower[live], upper[live]])
    change = np.concatenate([size[live], -size[live]])
    by_time = np.lexsort((change, times))
    return int(np.cumsum(change[by_time]).max(initial=0))


def lopsided(n, seed):
    """A trace that strains the index: most rows short and packed near time 0,
    a few living almost the whole trace, a cluster far out (2^40), never-live
    rows and zero-size rows. The far cluster crowds the time buckets of the
    classes it shares, which must then be searched."""
    rng = np.random.default_rng(seed)
    kind = rng.choice(5, size=n, p=[0.80, 0.03, 0.10, 0.04, 0.03])
    lower = rng.integers(0, 3000, n)
    length = rng.integers(1, 9, n)
    length = np.where(kind == 1, rng.integers(1000, 3000, n), length)
    lower = np.where(kind == 2, (1 << 40) + rng.integers(0, 60, n), lower)
    length = np.where(kind == 2, rng.integers(1, 40, n), length)
    length = np.where(kind == 3, 0, length)                      # never live
    size = rng.integers(1, 4097, n)
    size = np.where(kind == 4, 0, size)                          # zero-size
    return lower, lower + length, size


CASES = {
    "uniform": lambda: synthetic_traces.uniform(20000, seed=4),
    "lopsided": lambda: lopsided(17000, seed=7),
}


@pytest.mark.parametrize("fit", ["best", "first"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_large_greedy_pass_equals_the_specification(case, fit):
    lower, upper, size = CASES[case]()
    alignment = 16 if case == "lopsided" else 1
    assert len(size) >= 16384  # the threaded pass
    got = mm.place(lower, upper, size, "greedy_by_size", alignment, fit=fit)
    want = greedy_spec(lower, upper, size, alignment, fit)
    assert np.array_equal(np.asarray(got.offsets, np.int64), want)
    assert got.size == int((want + -(-np.asarray(size) // alignment) * alignment).max())
    # Times packed (uniform: a table of changes) or spread to 2^40 (lopsided: a sort).
    assert got.lower_bound == peak_spec(lower, upper, -(-np.asarray(size) // alignment) * alignment)


def test_ends_past_32_bits_equal_the_specification():
    """The index keeps 32-bit offsets until an end passes 2^32-1, then the
    pass starts again with 64-bit ones: threaded (17,000 random buffers up
    to 2 GiB, the end passed early) and on one thread (5,000 buffers live
    together, the end passed at the 4,097th), the answer is the spec's. A
    buffer that alone passes 2^32-1 skips the 32-bit try."""
    lower, upper, size = synthetic_traces.uniform(17000, seed=5)
    size = size << 11
    assert size.max() <= 2**32 - 1
    got = mm.place(lower, upper, size, "greedy_by_size")
    want = greedy_spec(lower, upper, size)
    assert np.array_equal(np.asarray(got.offsets, np.int64), want)
    assert got.size == int((want + size).max()) > 2**32
    n = 5000
    stacked = mm.place(np.zeros(n, np.int64), np.full(n, 3), np.full(n, 2**20), "greedy_by_size")
    assert np.array_equal(np.asarray(stacked.offsets, np.int64), np.arange(n) * 2**20)
    assert stacked.size == n * 2**20
    huge = mm.place([0, 1, 2], [5, 6, 7], [2**33, 2**33 + 1, 7], "greedy_by_size")
    assert huge.offsets.tolist() == [2**33 + 1, 0, 2**34 + 1]


def parted(n, seed, far=True):
    """Dense bursts apart in time (a greedy pass over them runs on one
    thread), one far out (2^40: the parts are then cut by sorting, not by
    counting instants), with zero-size rows and never-live ones (which
    place() leaves out): a trace whose whole greedy passes take the threads
    part by part (docs/strategies.md §2, "Time parts")."""
    rng = np.random.default_rng(seed)
    burst = rng.integers(0, 7, n)
    start = np.where((burst == 6) & far, 1 << 40, burst * 5000)
    lower = start + rng.integers(0, 300, n)
    length = rng.integers(1, 2000, n)
    kind = rng.choice(3, size=n, p=[0.96, 0.02, 0.02])
    length = np.where(kind == 1, 0, length)                      # never live
    size = rng.integers(1, 1 << 20, n)
    size = np.where(kind == 2, 0, size)                          # zero-size
    return lower, lower + length, size


@pytest.mark.parametrize("fit", ["best", "first"])
def test_pass_by_time_parts_equals_the_specification(fit):
    """A whole pass over a dense trace that falls apart in time places each
    part on its own, the parts on the threads at once: the offsets must be
    the specification's, and the work the one-thread pass's (checked across
    thread counts in test_thread_count_changes_nothing)."""
    lower, upper, size = parted(17000, seed=3)
    hook = _core._parts_pass(lower.astype(np.uint64), upper.astype(np.uint64), size.astype(np.uint64), fit,
                             2**64 - 1)
    assert hook["takes_parts"]  # else this tests the one-thread pass again
    got = mm.place(lower, upper, size, "greedy_by_size", 16, fit=fit)
    assert np.array_equal(np.asarray(got.offsets, np.int64), greedy_spec(lower, upper, size, 16, fit))


@pytest.mark.parametrize("far", [True, False], ids=["sorted", "counted"])
@pytest.mark.parametrize("fit", ["best", "first"])
def test_closing_pass_by_parts_is_whole_or_given_up(fit, far):
    """auto's closing pass on such a trace (a run bound by its passes) goes
    part by part, the part with the highest peak first, and stops once one
    passes the limit: within the limit it must be the whole pass (offsets,
    end, work), past it given up, wherever the limit falls."""
    lower, upper, size = parted(17000, seed=4, far=far)
    live = lower < upper  # place() leaves never-live rows out; the hook would charge them a step each
    lower, upper, size = (v[live].astype(np.uint64) for v in (lower, upper, size))
    whole = mm.place(lower, upper, size, "greedy_by_size", fit=fit)
    for limit in (2**64 - 1, whole.size):
        r = _core._parts_pass(lower, upper, size, fit, limit)
        assert r["takes_parts"] and r["answered"] and not r["abandoned"]
        assert r["end"] == whole.size and r["work"] == whole.work
        assert np.array_equal(r["offsets"], whole.offsets)
    for limit in (whole.size - 1, whole.size // 2, 0):
        r = _core._parts_pass(lower, upper, size, fit, limit)
        assert r["answered"] and r["abandoned"]
    # One buffer living throughout joins the parts into one: passes stay whole.
    joined = (np.append(v, x).astype(np.uint64) for v, x in ((lower, 0), (upper, int(upper.max())), (size, 1)))
    assert not _core._parts_pass(*joined, fit, 2**64 - 1)["takes_parts"]


def dense(n, seed):
    """Most buffers live together (every conflict set above the 512 from which
    the gap search sums conflicts up in offset buckets instead of sorting
    them), a few sizes that stack at shared offsets, zero-size rows."""
    rng = np.random.default_rng(seed)
    lower = rng.integers(0, 64, n)
    length = rng.integers(1, 400, n)
    size = rng.choice([0, 24, 64, 100, 640, 1000, 4096], size=n, p=[0.02, 0.2, 0.2, 0.2, 0.18, 0.1, 0.1])
    return lower, lower + length, size * rng.integers(1, 3, n)


@pytest.mark.parametrize("fit", ["best", "first"])
def test_dense_conflicts_equal_the_specification(fit):
    lower, upper, size = dense(1500, seed=3)
    got = mm.place(lower, upper, size, "greedy_by_size", 8, fit=fit)
    assert np.array_equal(np.asarray(got.offsets, np.int64), greedy_spec(lower, upper, size, 8, fit))


# Dense instances of at least 1,024 buffers with no zero-size one take a
# union index (docs/strategies.md §2): the same gaps, read from unions of
# placed bytes instead of from every conflict. Near-cliques and clusters
# crowd around a few instants (the stab index), the long training step and
# long random lifetimes do not (unions over time ranges).
@pytest.mark.parametrize("fit", ["best", "first"])
@pytest.mark.parametrize("family", synthetic_traces.DENSE_FAMILIES)
def test_union_index_pass_equals_the_specification(family, fit):
    lower, upper, size = synthetic_traces.generate(family, 2500, seed=5)
    alignment = 64 if family == "clusters" else 1
    got = mm.place(lower, upper, size, "greedy_by_size", alignment, fit=fit)
    assert np.array_equal(np.asarray(got.offsets, np.int64), greedy_spec(lower, upper, size, alignment, fit))


def test_union_index_keeps_touching_spans_and_zero_length_lifetimes():
    """Stacks of equal sizes (spans touching end to end, which a union
    merges), never-live rows, repeated intervals and a few huge sizes, dense
    enough for the union index: the spec's offsets, with either fit."""
    rng = np.random.default_rng(11)
    n = 3000
    lower = rng.integers(0, 40, n)
    upper = lower + rng.integers(0, 300, n)          # some never live (length 0)
    size = rng.choice([16, 32, 48, 4096, 2**40], size=n, p=[0.3, 0.3, 0.3, 0.09, 0.01])
    for fit in ("best", "first"):
        got = mm.place(lower, upper, size, "greedy_by_size", 16, fit=fit)
        assert np.array_equal(np.asarray(got.offsets, np.int64), greedy_spec(lower, upper, size, 16, fit))


def crowds(n, seed, crowd_count, alignment_sizes=False):
    """`crowd_count` instants, each with a crowd of buffers living over it
    (90% of all), beside short buffers anywhere (some over a crowd's
    instant, some before or after every crowd's)."""
    rng = np.random.default_rng(seed)
    steps = 4000
    instants = np.sort(rng.choice(np.arange(100, steps - 100), crowd_count, replace=False))
    in_crowd = rng.random(n) < 0.9
    at = instants[rng.integers(0, crowd_count, n)]
    lower = np.where(in_crowd, at - rng.integers(0, 90, n), rng.integers(0, steps, n))
    upper = np.where(in_crowd, at + 1 + rng.integers(0, 90, n), lower + rng.integers(1, 30, n))
    if alignment_sizes:
        size = rng.choice([16, 32, 48, 4096, 2**40], size=n, p=[0.3, 0.3, 0.3, 0.09, 0.01])
    else:
        size = rng.integers(1, 1 << 20, n)
    return lower, upper, size


@pytest.mark.parametrize("crowd_count", [1, 3, 16, 20])
def test_stab_index_pass_equals_the_specification(crowd_count):
    """Crowds at 1-20 instants (past 16 some crowd is left to rows), sizes
    that stack into touching spans and 2^40-byte ones, alignment 16: the
    spec's offsets, with either fit."""
    lower, upper, size = crowds(3000, seed=crowd_count, crowd_count=crowd_count, alignment_sizes=True)
    for fit in ("best", "first"):
        got = mm.place(lower, upper, size, "greedy_by_size", 16, fit=fit)
        assert np.array_equal(np.asarray(got.offsets, np.int64), greedy_spec(lower, upper, size, 16, fit))


def stab_share(lower, upper):
    """The share of the live buffers the stabs hold, found as the stab index
    finds them (strategies.md §2, "Crowds"): greedily the earliest instant
    where the most buffers not yet stabbed live, while one holds 1/32 of
    them, up to 16."""
    live = lower < upper
    lower, upper = lower[live], upper[live]
    free = np.ones(len(lower), bool)
    for _ in range(16):
        at = np.unique(lower[free])
        count = (np.searchsorted(np.sort(lower[free]), at, "right")
                 - np.searchsorted(np.sort(upper[free]), at, "right"))
        if len(at) == 0 or count.max() < max(1, len(lower) // 32):
            break
        t = at[np.argmax(count)]
        free &= ~((lower <= t) & (upper > t))
    return 1 - free.mean()


def bursts(n, seed, count=8):
    """Starts bunched around `count` instants 5,000 steps apart (spread 300),
    random lifetimes up to 2,000 steps: no instant holds most of its burst."""
    rng = np.random.default_rng(seed)
    lower = 5000 * rng.integers(1, count + 1, n) + rng.normal(0, 300, n).astype(np.int64)
    return lower, lower + rng.integers(1, 2000, n), rng.integers(1, 1 << 20, n)


@pytest.mark.parametrize("seed", [0, 1])
def test_stabs_holding_half_of_the_buffers_take_the_stab_index(seed):
    """Bursts of starts whose stabs hold about 70% of the buffers (below the
    3/4 asked before, where a pass over 10^5 of them took 10.6 s in rows and
    0.84 s with the stabs): the stab index, and the spec's offsets with
    either fit. Below half the stabs lose: the long training step (28% in
    stabs) keeps the union index, short random lifetimes keep rows."""
    lower, upper, size = bursts(3000, seed)
    assert 0.5 <= stab_share(lower, upper) < 0.75
    assert _core._dense_index(lower, upper, size) == "stabs"
    for fit in ("best", "first"):
        got = mm.place(lower, upper, size, "greedy_by_size", fit=fit)
        assert np.array_equal(np.asarray(got.offsets, np.int64), greedy_spec(lower, upper, size, fit=fit))
    step = synthetic_traces.generate("long_step", 3000, seed=0)
    assert stab_share(step[0], step[1]) < 0.5 and _core._dense_index(*step) == "unions"
    few = synthetic_traces.generate("uniform", 3000, seed=0)
    assert stab_share(few[0], few[1]) < 0.5 and _core._dense_index(*few) == "rows"


def test_stab_index_charges_the_crowd_not_every_conflict():
    """A near-clique (95% of the buffers live at its middle): a pass over
    rows would charge at least 13 units for each of its 47 million
    conflicts, the unions over time ranges about 21 (ragged parts of the
    one stack, node by node: 981M units); the stab index reads the crowd's
    stack once a query, for under 2 units a conflict (80M)."""
    lower, upper, size = synthetic_traces.generate("near_clique", 10000, seed=0)
    starts, ends = np.sort(lower), np.sort(upper)
    pairs = int((np.searchsorted(starts, upper, "left") - np.searchsorted(ends, lower, "right")).sum()
                - len(lower)) // 2
    assert pairs > 4 * 10**7
    got = mm.place(lower, upper, size, "greedy_by_size", fit="first")
    assert got.work < 2 * pairs
    assert np.array_equal(np.asarray(got.offsets, np.int64), greedy_spec(lower, upper, size, fit="first"))


@pytest.mark.parametrize("seed", [0, 1])
def test_short_buffers_read_part_of_a_crowd_in_offset_order(seed):
    """A near-clique: a short buffer before (or after) the crowd's instant lives with the members
    begun before its end (ended after its start), about half of them, and a member with about
    half the short buffers. Where that part is large it is not copied out but read in place, every
    placed member (or row) walked by offset and kept when live with the query
    (StabIndex::collect_lending): the spec's offsets, with either fit, alignment 16. (A row kept
    one step too long fails it and five other tests.)"""
    lower, upper, size = synthetic_traces.generate("near_clique", 3000, seed=seed)
    for fit in ("best", "first"):
        got = mm.place(lower, upper, size, "greedy_by_size", 16, fit=fit)
        assert np.array_equal(np.asarray(got.offsets, np.int64), greedy_spec(lower, upper, size, 16, fit))


def test_union_index_charges_the_unions_not_every_conflict():
    """One long training step (every saved activation lives from its
    forward op to its backward op): a pass over rows would charge at least
    13 units for each of its 14 million conflicts; the union index reads a
    few ranges per node of the time tree, for under a tenth of that."""
    lower, upper, size = synthetic_traces.generate("long_step", 10000, seed=0)
    order = np.argsort(lower, kind="stable")
    starts, ends = np.sort(lower), np.sort(upper)
    pairs = int((np.searchsorted(starts, upper[order], "left") - np.searchsorted(ends, lower[order], "right")).sum()
                - len(lower)) // 2
    assert pairs > 10**7
    got = mm.place(lower, upper, size, "greedy_by_size")
    assert got.work < 13 * pairs // 10
    assert np.array_equal(np.asarray(got.offsets, np.int64), greedy_spec(lower, upper, size))


# What the scripts below share: `record` keeps a placement's offsets (by
# digest) and every figure that must not depend on how the work was scheduled.
_PRELUDE = """
import hashlib, json, sys
import numpy as np
import emel.memory as mm, synthetic_traces as st
out = {{}}
def record(key, r, verdicts=True):
    digest = hashlib.sha256(np.asarray(r.offsets, np.uint64).tobytes()).hexdigest()
    out[key] = [digest, r.size, r.work, r.method] + ([r.optimal, r.proven_bound] if verdicts else [])
"""


def _run_script(body, **env):
    """Runs _PRELUDE + body in a fresh interpreter with `env` added; its JSON."""
    code = (_PRELUDE + body).format(challenging=str(CHALLENGING))
    done = subprocess.run([sys.executable, "-c", code], env=child_env(**env), capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


_RUN = """
for fam in ("uniform", "transformer"):
    lower, upper, size = st.generate(fam, 40000, 2)
    for strategy, fit in (("greedy_by_size", "best"), ("greedy_by_size", "first"), ("auto", "best")):
        r = mm.place(lower, upper, size, strategy, fit=fit, time_budget_ms=50)
        record(f"{{fam}} {{strategy}} {{fit}}", r, verdicts=False)
# The union index (a long training step): its queries may run on the threads too.
lower, upper, size = st.generate("long_step", 40000, 1)
for fit in ("best", "first"):
    record(f"long_step greedy_by_size {{fit}}", mm.place(lower, upper, size, "greedy_by_size", fit=fit),
           verdicts=False)
# The stab index (8 near-cliques in turn).
lower, upper, size = st.generate("clusters", 40000, 1)
for fit in ("best", "first"):
    record(f"clusters greedy_by_size {{fit}}", mm.place(lower, upper, size, "greedy_by_size", fit=fit),
           verdicts=False)
# Random lifetimes up to 2,000 steps, 10^5 buffers, by size: most buffers of
# a batch wait on an earlier one, but in levels wide enough for the threads.
lower, upper, size = st.generate("uniform_long", 100000, 0)
record("uniform_long greedy_by_size first", mm.place(lower, upper, size, "greedy_by_size", fit="first"),
       verdicts=False)
# There auto's live-peak pass runs on one thread: greedy by size with best fit
# runs beside it from then on (two threads or more), and the default run
# stalls after its first windows.
record("uniform_long auto default", mm.place(lower, upper, size), verdicts=False)
# Dense traces where auto's passes run on one thread: greedy by size with
# best fit runs ahead on a side thread (two threads or more) and is taken as
# if run in its turn: given up in the later passes (uniform_long at 2,000
# ms) or at the end (50 ms), or winning at the end (near-clique seed 9).
for fam, seed, budget in (("uniform_long", 0, 2000), ("uniform_long", 0, 50), ("near_clique", 9, 50)):
    lower, upper, size = st.generate(fam, 17000, seed)
    record(f"{{fam}} {{seed}} auto {{budget}}", mm.place(lower, upper, size, "auto", time_budget_ms=budget),
           verdicts=False)
# A budget that reaches auto's later passes, which are given up once they
# cannot win: one thread must give up where the batches of two would, or
# the work charged (and so every later budget choice) depends on the cores.
lower, upper, size = st.generate("uniform", 40000, 2)
record("uniform auto 1000", mm.place(lower, upper, size, "auto", time_budget_ms=1000), verdicts=False)
# The default budget on a run bound by its passes (docs/strategies.md §4):
# window neighbourhoods searched one ahead with most of the budget, then the
# wider peak windows with what they leave.
lower, upper, size = st.lognormal(80000, 31)
record("lognormal auto default", mm.place(lower, upper, size, "auto"), verdicts=False)
# Dense bursts apart in time: whole passes take the threads part by part,
# and the default run (bound by its passes) checks greedy by size with best
# fit part by part beside its first pass, given up once a part passes the
# answer (docs/strategies.md §2, "Time parts"). One thread: whole passes.
lower, upper, size = st.bursty(40000, 1, centers=10)
for fit in ("best", "first"):
    record(f"bursty parts greedy_by_size {{fit}}", mm.place(lower, upper, size, "greedy_by_size", fit=fit),
           verdicts=False)
record("bursty parts auto default", mm.place(lower, upper, size), verdicts=False)
# Time sections whose later sections are searched (the preorders side by
# side) and window neighbourhoods searched one ahead: an unflushed 1F1B trace.
import workload_traces as wt
lower, upper, size = wt.generate("pipeline_1f1b_noflush", 21504, 3)
for strategy in ("auto", "optimal"):
    record(f"1f1b {{strategy}} 600", mm.place(lower, upper, size, strategy, time_budget_ms=600))
# auto's local search two rounds at once (two threads or more), the second
# dropped where the first is taken: a KV-cache trace whose walk takes 5 of
# some 370 rounds.
lower, upper, size = wt.generate("kv_realloc", 6000, 7)
record("kv_realloc auto 500", mm.place(lower, upper, size, "auto", time_budget_ms=500), verdicts=False)
# The neighbourhood search two attempts at once (two threads or more), the
# second dropped where the first finds: 10 of 190 attempts find.
from emel.memory import _core
lower, upper, size = st.generate("uniform", 600, 0)
r = _core._neighbourhoods(lower.astype(np.uint64), upper.astype(np.uint64), size.astype(np.uint64), 10**8)
out["neighbourhoods"] = [hashlib.sha256(np.asarray(r["offsets"], np.uint64).tobytes()).hexdigest(), r["end"],
                         r["work"], [list(a) for a in r["attempts"]]]
# The exact search races its three preorders on a thread each past 64 buffers
# (D: many decisions cut by the budget, searches cancelled by a faster one).
for name in ("D", "G", "H", "K"):
    _, lower, upper, size = mm.read_buffers_csv({challenging!r} + f"/{{name}}.1048576.csv")
    for strategy, budget in (("optimal", 300), ("auto", 300), ("optimal", 30)):
        r = mm.place(lower, upper, size, strategy, time_budget_ms=budget, capacity=1048576)
        record(f"{{name}} {{strategy}} {{budget}}", r)
print(json.dumps(out))
"""


def test_thread_count_changes_nothing():
    """The greedy passes (past 16,384 buffers), auto's side pass, its local
    search's rounds, the neighbourhood search's attempts and the exact
    search (past 64) use threads; offsets, size, work and verdicts must not
    depend on how many (one thread: no side pass)."""
    results = [_run_script(_RUN, EMEL_THREADS=threads) for threads in ("1", "2", "3")]
    assert results[0] == results[1] == results[2]
    assert len(results[0]) == 6 + 2 + 2 + 2 + 3 + 1 + 1 + 3 + 2 + 1 + 1 + 12
    assert results[0]["kv_realloc auto 500"][3] == "auto_search"
    assert sum(found for _, _, _, found in results[0]["neighbourhoods"][3]) >= 5
    assert results[0]["lognormal auto default"][3] == "peak_window"
    assert results[0]["bursty parts auto default"][3] == "time_sections"
    assert results[0]["near_clique 9 auto 50"][3] == "greedy_by_size"  # the side pass's answer won


_RACE = """
cases = []
for name in ("D", "G"):
    _, lower, upper, size = mm.read_buffers_csv({challenging!r} + f"/{{name}}.1048576.csv")
    cases.append((name, lower, upper, size, 1, 1048576))
rng = np.random.default_rng(7)
for k in range(4):  # small random instances with empty rows and alignment
    n = 40
    lower = rng.integers(0, 30, n); upper = lower + rng.integers(0, 12, n)
    size = rng.integers(0, 300, n); size[rng.random(n) < 0.1] = 0
    cases.append((f"random{{k}}", lower, upper, size, 8, None))
for name, lower, upper, size, alignment, capacity in cases:
    for strategy, budget in (("optimal", 300), ("optimal", 20), ("auto", 300)):
        r = mm.place(lower, upper, size, strategy, alignment=alignment, time_budget_ms=budget, capacity=capacity)
        record(f"{{name}} {{strategy}} {{budget}}", r)
print(json.dumps(out))
"""


def test_race_on_threads_or_by_restarts_agrees():
    """The exact search races its preorders on a thread each (past 64
    buffers) or, on smaller instances, by restarting them on one thread
    (strategies.md §5); both must give the same offsets, work and verdicts.
    EMEL_SEARCH_THREADS_FROM moves the line to send every instance one way."""
    results = [_run_script(_RACE, EMEL_SEARCH_THREADS_FROM=threads_from, EMEL_THREADS=threads)
               for threads_from, threads in (("1", "2"), ("1", "1"), ("1000000", "2"))]
    assert results[0] == results[1] == results[2]
    assert len(results[0]) == 6 * 3
    # The budget-cut runs must really be cut somewhere, or they test nothing new.
    assert any(not v[4] for k, v in results[0].items() if k.endswith("optimal 20"))


_OVERFLOW = """
# Batch 0 (the 512 largest): two buffers that leave room for one 2^40 on
# top (h1) and none (h2), and fillers apart in time. Batch 1: x1 and x2 of
# 2^40 live with h1 and each other (x2 overflows, after x1 in the batch),
# y of 2^40 live with h2 only (overflows too, later in the order, but
# first found: it waits for no other buffer of its batch). The pass names
# x2, as one thread placing in order would.
lower, upper, size = [0, 100], [10, 110], [2**64 - 2**41, 2**64 - 2**39]
lower += [1000 + i for i in range(510)]; upper += [1001 + i for i in range(510)]; size += [2**41] * 510
x2 = len(size) + 1
lower += [0, 1, 100]; upper += [5, 6, 105]; size += [2**40] * 3
lower += [3000 + i for i in range(16384)]; upper += [3001 + i for i in range(16384)]; size += [1] * 16384
try:
    mm.place(lower, upper, size, "greedy_by_size")
except mm.PlanError as e:
    out["named"], out["x2"] = e.tensor, str(x2)
# auto's slots and online best fit (side by side on two threads) overflow at
# different rows: auto names the slots' one, the first in its portfolio.
for strategy in ("auto", "tmmu", "best_fit"):
    try:
        mm.place(lower, upper, size, strategy)
    except mm.PlanError as e:
        out[strategy] = e.tensor
print(json.dumps(out))
"""


def test_batched_pass_names_the_first_buffer_to_overflow():
    """Past 16,384 buffers the greedy pass finds a batch's gaps level by
    level, not in order: the overflow it reports must still be the first in
    the order, whatever the threads. So must auto's, whose slots and online
    best fit run side by side there."""
    results = [_run_script(_OVERFLOW, EMEL_THREADS=threads) for threads in ("1", "2")]
    assert results[0] == results[1]
    assert results[0]["named"] == results[0]["x2"]
    assert results[0]["auto"] == results[0]["tmmu"] != results[0]["best_fit"]
