"""emel's place() side by side with the peers: OmniMalloc (PyPI) and MiniMalloc (a binary).

Instances (every one: rows ``id,lower,upper,size``, half-open ``[lower, upper)``):
  challenging  MiniMalloc's 11 challenging instances A-K (data/dsa/minimalloc-challenging),
               posed at the capacity in the file name (1,048,576 bytes)
  idealloc     the idealloc traces (data/dsa/idealloc), no posed capacity
  synthetic    seeded traces of bench/synthetic_traces.py: transformer-like and uniform random,
               at 10^4 and 10^5 buffers (--synthetic-sizes); 10^6 with --scale
  perfect      perfect packings of bench/perfect_packing.py (guillotine, pinwheel, mixed cuts of a
               full rectangle, --perfect-sizes buffers): the optimum is the lower bound, posed as
               the capacity
  workloads    seeded traces of real-workload shapes (bench/workload_traces.py: pipeline-parallel
               1F1B training with and without flushes, paged-KV decoding with continuous batching)
               at --workload-sizes buffers (default 21,504 and 103,000) and --workload-seeds, posed
               at the lower bound as the capacity; emel auto and optimal at --workload-budget-ms
               (optimal whatever the size: above 16,384 buffers it searches by time sections)

Contenders, run interleaved: for each repeat, every contender once, in an order rotated by repeat
and instance so that machine noise hits all alike.
  emel:      greedy_by_size, greedy_by_size fit=first, best_fit, auto (--budget-ms; on the
             challenging set with capacity= the posed size at --challenging-budget-ms), optimal
             (same budget and capacity; instances of up to --optimal-max-buffers rows); with
             --auto-budgets B1,B2,...: auto at those budgets too, and a table of each budget's
             answer and wall time against the best peer (auto's budget buys size with time: the
             table says from which budget on it is no larger and no slower)
  omnimalloc: each fast greedy order (size, conflict_size, conflict, area, duration, start),
             best_fit, the omni ensemble, supermalloc(num_threads=12, timeout=--peer-timeout-s)
             and simulated annealing (timeout=--peer-timeout-s, iterations unbounded)
  minimalloc: the binary (--minimalloc, $EMEL_MINIMALLOC or `minimalloc` on PATH), stack
             unlimited, address space --peer-mem-gb, --timeout=--peer-timeout-s; at the posed capacity, else at the sum of
             sizes with --minimize_capacity (its binary search keeps the best answer it found)

Every answer is re-checked here (check_placement: a sweep over time keeping the live buffers
sorted by offset), independently of each allocator's own validation. Sizes are the highest
``offset + size`` (emel's reported arena size must cover it) against the lower bound, the peak of
live bytes. Wall time covers the allocator call (emel: place(); omnimalloc: allocate() on prebuilt
Allocation objects; minimalloc: the process, CSV in and out). Rows that are never live
(lower == upper) or hold no bytes are left out for the peers, which reject them (offset 0 in the
check); emel gets every row.

    python bench/peers.py [--only challenging,idealloc,synthetic,perfect] [--instances A,B,S_1]
        [--repeats N] [--budget-ms 1000] [--challenging-budget-ms 10000] [--auto-budgets 500,2000]
        [--peer-timeout-s S] [--skip-peers] [--scale] [--minimalloc PATH] [--peer-mem-gb 8] [--out FILE]
"""

from __future__ import annotations

import argparse
import bisect
import csv
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# OpenBLAS's idle threads spin for a while after any call and would take a core
# from the allocators being timed; none of them uses BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from _common import DATA, print_table, write_json  # noqa: E402
import perfect_packing  # noqa: E402
import synthetic_traces  # noqa: E402
import workload_traces  # noqa: E402

GROUPS = ("challenging", "idealloc", "synthetic", "perfect", "workloads")
WORKLOAD_FAMILIES = ("pipeline_1f1b", "pipeline_1f1b_noflush", "paged_kv")
OM_GREEDY = ("greedy_by_size", "greedy_by_conflict_size", "greedy_by_conflict", "greedy_by_area",
             "greedy_by_duration", "greedy_by_start")


# ---------------------------------------------------------------------------
# Independent checks: the lower bound and the placement checker
# ---------------------------------------------------------------------------
def lower_bound(lower, upper, size) -> int:
    """The peak of live bytes: rows live over half-open [lower, upper); lower == upper is never live."""
    lower, upper, size = (np.asarray(a, dtype=np.int64) for a in (lower, upper, size))
    live = lower < upper
    times = np.concatenate([lower[live], upper[live]])
    deltas = np.concatenate([size[live], -size[live]])
    if not len(times):
        return 0
    order = np.lexsort((deltas, times))        # at one time, frees (negative) before allocations
    return int(max(0, np.cumsum(deltas[order]).max()))


@dataclass
class Check:
    valid: bool                                  # no overlap, no negative offset, reported size covers
    max_end: int                                 # highest offset + size (0 without bytes)
    overlaps: list = field(default_factory=list)  # (row, row) pairs live together with shared bytes
    negative: list = field(default_factory=list)  # rows with offset < 0
    over_capacity: bool = False                   # max_end > the posed capacity
    problems: list = field(default_factory=list)  # everything wrong, in words


def check_placement(lower, upper, size, offsets, capacity: int | None = None,
                    reported_size: int | None = None, max_overlaps: int = 20) -> Check:
    """Check a placement from scratch: no two rows live at one time share a byte.

    A sweep over time (at each time, frees before allocations: intervals are half-open) keeps the
    live rows that hold bytes in a list sorted by offset. While the live set is disjoint, a new row
    overlaps some live row exactly when it overlaps its neighbour below (the last start <= its
    offset) or the ones above it that start before its end, so each insertion looks only there. An
    overlapping row is reported with every live row it overlaps and is not inserted (the set stays
    disjoint), so the first overlapping pair is always found and each reported pair is real.
    Also: offsets >= 0 and the highest end within ``reported_size`` (both part of ``valid``),
    and whether it is within the posed ``capacity`` (``over_capacity``, not part of ``valid``)."""
    lower, upper, size = (np.asarray(a, dtype=np.int64) for a in (lower, upper, size))
    offsets = np.asarray(offsets)
    if offsets.dtype == np.uint64:
        if len(offsets) and offsets.max() > np.iinfo(np.int64).max // 2:
            raise ValueError("offset beyond 2^62: not checkable in int64")
        offsets = offsets.astype(np.int64)
    offsets = offsets.astype(np.int64)
    n = len(size)
    if not (len(lower) == len(upper) == len(offsets) == n):
        raise ValueError("lower, upper, size and offsets must have one length")
    problems = []
    negative = np.nonzero(offsets < 0)[0].tolist()
    if negative:
        problems.append(f"{len(negative)} negative offsets (first: row {negative[0]})")
    ends = offsets + size
    max_end = int(ends[size > 0].max()) if (size > 0).any() else 0

    holds = np.nonzero((lower < upper) & (size > 0))[0]
    # Events: (time, kind, row) with kind 0 = free, 1 = allocate; frees first at one time.
    times = np.concatenate([upper[holds], lower[holds]])
    kinds = np.concatenate([np.zeros(len(holds), np.int8), np.ones(len(holds), np.int8)])
    rows = np.concatenate([holds, holds])
    order = np.lexsort((rows, kinds, times))
    ev_kind = kinds[order].tolist()
    ev_row = rows[order].tolist()
    off = offsets.tolist()
    end = ends.tolist()
    starts: list[tuple[int, int]] = []     # (offset, row) of the live rows, sorted
    inserted = np.zeros(n, dtype=bool)
    overlaps = []
    bad_rows = 0
    for kind, r in zip(ev_kind, ev_row):
        if kind == 0:
            if inserted[r]:
                del starts[bisect.bisect_left(starts, (off[r], r))]
                inserted[r] = False
            continue
        o, e = off[r], end[r]
        i = bisect.bisect_right(starts, (o, n))          # first live start > o (ties: all <= o)
        hits = []
        k = i - 1                                        # below: starts <= o (disjoint set: only the last can reach o)
        if k >= 0 and end[starts[k][1]] > o:
            hits.append(starts[k][1])
        k = i
        while k < len(starts) and starts[k][0] < e:       # above: starts in (o, e)
            hits.append(starts[k][1])
            k += 1
        if hits:
            bad_rows += 1
            if len(overlaps) < max_overlaps:
                overlaps.extend((min(r, h), max(r, h)) for h in hits)
            continue
        starts.insert(i, (o, r))
        inserted[r] = True
    if bad_rows:
        problems.append(f"{bad_rows} rows overlap a row live with them, e.g. {sorted(set(overlaps))[:3]}")
    if reported_size is not None and max_end > reported_size:
        problems.append(f"highest end {max_end:,} above the reported size {reported_size:,}")
    # Over the posed capacity is an answer that does not fit, not a broken one: reported apart.
    over = capacity is not None and max_end > capacity
    return Check(valid=not problems, max_end=max_end, overlaps=sorted(set(overlaps)),
                 negative=negative, over_capacity=over, problems=problems)


def overlapping_pairs_bruteforce(lower, upper, size, offsets) -> list[tuple[int, int]]:
    """Every overlapping (row, row) pair by comparing all pairs: O(n^2), for tests."""
    lower, upper, size, offsets = (np.asarray(a, dtype=np.int64) for a in (lower, upper, size, offsets))
    t = (lower[:, None] < upper[None, :]) & (lower[None, :] < upper[:, None])
    s = (offsets[:, None] < offsets[None, :] + size[None, :]) & \
        (offsets[None, :] < offsets[:, None] + size[:, None])
    b = (size > 0) & (lower < upper)
    m = t & s & b[:, None] & b[None, :]
    i, j = np.nonzero(np.triu(m, 1))
    return list(zip(i.tolist(), j.tolist()))


# ---------------------------------------------------------------------------
# Instances
# ---------------------------------------------------------------------------
@dataclass
class Instance:
    group: str
    name: str
    lower: np.ndarray
    upper: np.ndarray
    size: np.ndarray
    capacity: int | None = None
    bound: int = 0
    source: str = ""

    @property
    def label(self) -> str:
        return f"{self.group}/{self.name}"


def _read(path: Path):
    import emel.memory as mm
    _, lower, upper, size = mm.read_buffers_csv(path)
    return (np.asarray(lower, np.int64), np.asarray(upper, np.int64), np.asarray(size, np.int64))


def _short(n: int) -> str:
    return {10**4: "10k", 10**5: "100k", 10**6: "1M"}.get(n, str(n))


def load_instances(groups, names, synthetic_sizes, families, seed, perfect_sizes=(), workload_sizes=(),
                   workload_seeds=(), perfect_seeds=None) -> list[Instance]:
    out = []
    want = set(names) if names else None
    if "challenging" in groups:
        for path in sorted((DATA / "dsa" / "minimalloc-challenging").glob("*.csv")):
            name, cap = path.stem.split(".")[0], int(path.stem.split(".")[1])
            if want is None or name in want:
                out.append(Instance("challenging", name, *_read(path), capacity=cap, source=str(path)))
    if "idealloc" in groups:
        for path in sorted((DATA / "dsa" / "idealloc").glob("*.csv")):
            if want is None or path.stem in want:
                out.append(Instance("idealloc", path.stem, *_read(path), source=str(path)))
    if "synthetic" in groups:
        for n in synthetic_sizes:
            for fam in families:
                name = f"{fam}-{_short(n)}"
                if want is None or name in want:
                    out.append(Instance("synthetic", name, *synthetic_traces.generate(fam, n, seed),
                                        source=f"synthetic_traces.{fam}(n={n}, seed={seed})"))
    if "perfect" in groups:
        for n in perfect_sizes:
            for kind in perfect_packing.CUTS:
                # --perfect-seeds names each seed's cut; without it, --seed's cut keeps the bare name.
                for ps in (perfect_seeds if perfect_seeds else [seed]):
                    name = f"{kind}-{n}-s{ps}" if perfect_seeds else f"{kind}-{n}"
                    if want is None or name in want:
                        lower, upper, size, _, optimum = perfect_packing.cut_rectangle(n, kind=kind, seed=ps)
                        out.append(Instance("perfect", name, lower, upper, size, capacity=optimum,
                                            source=f"perfect_packing.cut_rectangle({n}, kind={kind!r}, seed={ps})"))
    if "workloads" in groups:
        for n in workload_sizes:
            for fam in WORKLOAD_FAMILIES:
                for ws in workload_seeds:
                    name = f"{fam}-{n}-s{ws}"
                    if want is None or name in want:
                        out.append(Instance("workloads", name, *workload_traces.generate(fam, n, ws),
                                            source=f"workload_traces.generate({fam!r}, {n}, seed={ws})"))
    for inst in out:
        inst.bound = lower_bound(inst.lower, inst.upper, inst.size)
        if inst.group == "workloads":
            inst.capacity = inst.bound  # posed at the bound: MiniMalloc then proves it or times out
    return out


# ---------------------------------------------------------------------------
# Contenders: each returns (offsets or None, reported size or None, status, info)
# ---------------------------------------------------------------------------
@dataclass
class Contender:
    name: str
    peer: str                      # "emel", "omnimalloc", "minimalloc"
    prepare: Callable              # Instance -> state (untimed)
    run: Callable                  # (Instance, state) -> (offsets | None, reported | None, status, info)


def emel_contenders(args) -> list[Contender]:
    import emel.memory as mm

    def make(strategy, fit="best", searched=False, budget_ms=None):
        def run(inst, _):
            kw = {}
            if searched:
                # "default": no time_budget_ms, the default-budget policy (--auto-default).
                if budget_ms != "default":
                    kw["time_budget_ms"] = budget_ms or main_budget(args, inst)
                kw["capacity"] = inst.capacity
            if strategy == "optimal" and len(inst.size) > args.optimal_max_buffers and inst.group != "workloads":
                return None, None, "skipped", {"why": f"over {args.optimal_max_buffers} buffers"}
            p = mm.place(inst.lower, inst.upper, inst.size, strategy=strategy, fit=fit, **kw)
            return p.offsets, p.size, "ok", {"method": p.method, "optimal": p.optimal,
                                             "emel_lower_bound": p.lower_bound, "work": p.work}
        return run

    label = lambda s, f: "emel " + s + ("/first" if f == "first" else "")  # noqa: E731
    return [Contender(label(s, f), "emel", lambda inst: None, make(s, f, searched))
            for s, f, searched in (("greedy_by_size", "best", False), ("greedy_by_size", "first", False),
                                   ("best_fit", "best", False), ("auto", "best", True),
                                   ("optimal", "best", True))] + \
        [Contender(auto_at(b), "emel", lambda inst: None, make("auto", "best", True, b)) for b in args.auto_budgets] + \
        ([Contender("emel auto (default)", "emel", lambda inst: None, make("auto", "best", True, "default"))]
         if args.auto_default else [])


def auto_at(budget_ms: int) -> str:
    """The name of emel auto run at one more budget (--auto-budgets)."""
    return f"emel auto@{budget_ms}ms"


def main_budget(args, inst) -> int:
    if inst.group == "workloads":
        return args.workload_budget_ms
    return args.challenging_budget_ms if inst.group == "challenging" else args.budget_ms


def peer_rows(inst: Instance) -> np.ndarray:
    """Rows the peers get: live (lower < upper) and holding bytes."""
    return np.nonzero((inst.lower < inst.upper) & (inst.size > 0))[0]


def omnimalloc_contenders(args) -> list[Contender]:
    import omnimalloc
    from omnimalloc import allocators as A
    from omnimalloc._cpp import Allocation

    cache = {}   # the last instance's Allocation objects, shared by the variants (allocate() copies)

    def prepare(inst):
        if cache.get("label") != inst.label:
            cache.clear()
            rows = peer_rows(inst)
            lo, up, sz = inst.lower[rows].tolist(), inst.upper[rows].tolist(), inst.size[rows].tolist()
            cache.update(label=inst.label,
                         state=(rows, [Allocation(i, s, a, b) for i, (a, b, s) in enumerate(zip(lo, up, sz))]))
        return cache["state"]

    def make(factory):
        def run(inst, state):
            rows, allocs = state
            placed = omnimalloc.allocate(allocs, allocator=factory())
            off = np.zeros(len(inst.size), dtype=np.int64)
            got = np.fromiter((a.offset for a in placed), dtype=np.int64, count=len(placed))
            ids = np.fromiter((a.id for a in placed), dtype=np.int64, count=len(placed))
            off[rows[ids]] = got
            return off, None, "ok", {}
        return run

    t = args.om_timeout_s
    variants = [(f"om {g}", getattr(A, "".join(w.title() for w in g.split("_")) + "Allocator"))
                for g in OM_GREEDY]
    variants += [("om best_fit", A.BestFitAllocator), ("om omni", A.OmniAllocator),
                 (f"om supermalloc(12t,{t:g}s)", lambda: A.SupermallocAllocator(timeout=t, num_threads=12)),
                 (f"om annealing({t:g}s)",
                  lambda: A.SimulatedAnnealingAllocator(max_iterations=2**31 - 1, timeout=t))]
    return [Contender(name, "omnimalloc", prepare, make(f)) for name, f in variants]


def find_minimalloc(arg: str | None) -> str | None:
    for cand in (arg, os.environ.get("EMEL_MINIMALLOC"), shutil.which("minimalloc")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _limits(mem_bytes: int | None):
    def apply():
        resource.setrlimit(resource.RLIMIT_STACK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        if mem_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    return apply


def minimalloc_contender(binary: str, args) -> Contender:
    timeout = args.mm_timeout_s

    def prepare(inst):
        rows = peer_rows(inst)
        tmp = tempfile.mkdtemp(prefix="peers-mm-")
        src = Path(tmp) / "in.csv"
        synthetic_traces.write_csv(src, inst.lower[rows], inst.upper[rows], inst.size[rows])
        return rows, tmp, src

    def run(inst, state):
        rows, tmp, src = state
        out = Path(tmp) / "out.csv"
        if out.exists():
            out.unlink()
        if inst.capacity is not None:
            cmd = [binary, f"--input={src}", f"--output={out}", f"--capacity={inst.capacity}"]
        else:  # no posed size: minimise from the trivial one
            cmd = [binary, f"--input={src}", f"--output={out}",
                   f"--capacity={int(inst.size[rows].sum())}", "--minimize_capacity"]
        cmd.append(f"--timeout={timeout:g}s")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30,
                                  preexec_fn=_limits(int(args.peer_mem_gb * 2**30)))
        except subprocess.TimeoutExpired:
            return None, None, "killed", {"why": f"no exit within {timeout + 30:g} s"}
        err = proc.stderr.strip().splitlines()
        info = {"returncode": proc.returncode, "stderr": err[-3:]}
        elapsed = [float(x.split()[2].rstrip("s")) for x in err if x.startswith("Elapsed time ")]
        if elapsed:
            info["solver_seconds"] = elapsed[-1]
        if proc.returncode != 0 or not out.exists():
            text = " ".join(err)
            # --minimize_capacity answers NOT_FOUND when its search ran out of time before any answer.
            ran_out = bool(elapsed) and elapsed[-1] >= timeout
            status = ("timeout" if "DEADLINE_EXCEEDED" in text or ("NOT_FOUND" in text and ran_out) else
                      "not_found" if "NOT_FOUND" in text else
                      "out_of_memory" if "bad_alloc" in text else
                      f"signal {-proc.returncode}" if proc.returncode < 0 else "error")
            return None, None, status, info
        off = np.zeros(len(inst.size), dtype=np.int64)
        with open(out, newline="") as f:
            reader = csv.DictReader(f)
            got = [(int(r["id"]), int(r["offset"])) for r in reader]
        if len(got) != len(rows):
            return None, None, "error", {**info, "why": f"{len(got)} rows back for {len(rows)}"}
        ids = np.array([g[0] for g in got], dtype=np.int64)
        off[rows[ids]] = [g[1] for g in got]
        return off, None, "ok", info

    return Contender("minimalloc", "minimalloc", prepare, run)


# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------
def run_instance(inst: Instance, contenders: list[Contender], repeats: int, rotation: int) -> list[dict]:
    states = {}
    for c in contenders:
        t = time.perf_counter()
        try:
            states[c.name] = c.prepare(inst)
        except Exception as e:  # noqa: BLE001 - a peer that cannot take the instance is reported
            states[c.name] = e
        states[c.name + "#prep"] = time.perf_counter() - t
    runs = {c.name: [] for c in contenders}
    for r in range(repeats):
        k = (rotation + r) % len(contenders)
        for c in contenders[k:] + contenders[:k]:
            state = states[c.name]
            t = time.perf_counter()
            try:
                if isinstance(state, Exception):
                    raise state
                offsets, reported, status, info = c.run(inst, state)
            except Exception as e:  # noqa: BLE001
                offsets, reported, status, info = None, None, "error", {"why": f"{type(e).__name__}: {e}"}
            wall = time.perf_counter() - t
            rec = {"repeat": r, "seconds": wall, "status": status, **info}
            if offsets is not None:
                chk = check_placement(inst.lower, inst.upper, inst.size, offsets, inst.capacity, reported)
                rec.update(size=reported if reported is not None else chk.max_end, max_end=chk.max_end,
                           valid=chk.valid, fits=None if inst.capacity is None else not chk.over_capacity,
                           problems=chk.problems)
            runs[c.name].append(rec)
            print(f"  [{inst.label}] r{r} {c.name:32s} {status:9s} {wall:8.2f} s"
                  + (f"  {rec['size'] / inst.bound:.4f}" if "size" in rec and inst.bound else "")
                  + ("" if rec.get("valid", True) else "  INVALID: " + "; ".join(rec["problems"])),
                  flush=True)
    for c in contenders:
        st = states[c.name]
        if isinstance(st, tuple) and len(st) == 3 and isinstance(st[1], str):
            shutil.rmtree(st[1], ignore_errors=True)       # minimalloc's temp dir
    rows = []
    for c in contenders:
        rs = runs[c.name]
        answered = [x for x in rs if "size" in x]
        sizes = [x["size"] for x in answered]
        row = {"group": inst.group, "instance": inst.name, "buffers": len(inst.size),
               "contender": c.name, "peer": c.peer, "bound": inst.bound, "capacity": inst.capacity,
               "answers": f"{len(answered)}/{len(rs)}",
               "status": ",".join(sorted({x["status"] for x in rs})),
               "size": min(sizes) if sizes else None,
               "size_varied": len(set(sizes)) > 1,
               "ratio": min(sizes) / inst.bound if sizes and inst.bound else None,
               "seconds": statistics.median(x["seconds"] for x in rs),
               "valid": (all(x["valid"] for x in answered) if answered else None),
               "fits": (None if inst.capacity is None or not sizes else min(sizes) <= inst.capacity),
               "prepare_seconds": states[c.name + "#prep"], "runs": rs}
        rows.append(row)
    return rows


def valid_answers(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["size"] is not None and r["valid"]]


def smallest(answers: list[dict]) -> dict | None:
    """The smallest answer; ties: the faster."""
    return min(answers, key=lambda r: (r["size"], r["seconds"]), default=None)


def verdict(rows: list[dict]) -> dict:
    """Best contender, and emel auto against the best peer (valid answers only)."""
    ok = valid_answers(rows)
    v = {"instance": rows[0]["instance"], "group": rows[0]["group"], "bound": rows[0]["bound"]}
    if not ok:
        return v
    best = smallest(ok)
    v.update(best=best["contender"], best_size=best["size"], best_ratio=best["ratio"])
    peers = [r for r in ok if r["peer"] != "emel"]
    auto = next((r for r in ok if r["contender"] == "emel auto"), None)
    if peers:
        bp = smallest(peers)
        v.update(best_peer=bp["contender"], peer_size=bp["size"], peer_ratio=bp["ratio"],
                 peer_s=bp["seconds"])
    if auto:
        v.update(auto_size=auto["size"], auto_ratio=auto["ratio"], auto_s=auto["seconds"])
    if peers and auto:
        v["auto_size_ok"] = auto["size"] <= bp["size"]
        v["auto_time_ok"] = auto["seconds"] <= bp["seconds"]
    return v


def budget_ladder(rows: list[dict], budgets: dict[str, int]) -> dict:
    """emel auto at each of its budgets (`budgets`: contender name -> budget in ms)
    against the peer answer that is smallest (ties: faster): whether auto's
    answer is no larger and came in no more wall time, and the smallest budget
    at which it is both ("dominates_at", None when no budget is)."""
    ok = valid_answers(rows)
    v = {"instance": rows[0]["instance"], "group": rows[0]["group"], "steps": []}
    bp = smallest([r for r in ok if r["peer"] != "emel"])
    if bp is None:
        return v
    v.update(best_peer=bp["contender"], peer_ratio=bp["ratio"], peer_s=bp["seconds"], dominates_at=None)
    for r in sorted((r for r in ok if r["contender"] in budgets), key=lambda r: budgets[r["contender"]]):
        step = {"budget_ms": budgets[r["contender"]], "ratio": r["ratio"], "seconds": r["seconds"],
                "size_ok": r["size"] <= bp["size"], "time_ok": r["seconds"] <= bp["seconds"]}
        v["steps"].append(step)
        if step["size_ok"] and step["time_ok"] and v["dominates_at"] is None:
            v["dominates_at"] = step["budget_ms"]
    return v


def slopes(rows: list[dict], names: tuple[str, ...]) -> list[dict]:
    """Log-log slope of time against buffers per synthetic family and contender (least squares)."""
    out = []
    fams = sorted({r["instance"].rsplit("-", 1)[0] for r in rows if r["group"] == "synthetic"})
    for fam in fams:
        for name in names:
            pts = sorted((r["buffers"], r["seconds"]) for r in rows
                         if r["group"] == "synthetic" and r["instance"].rsplit("-", 1)[0] == fam
                         and r["contender"] == name and r["size"] is not None and r["seconds"] > 0)
            if len(pts) >= 2:
                x = np.log10([p[0] for p in pts])
                y = np.log10([p[1] for p in pts])
                out.append({"family": fam, "contender": name, "points": len(pts),
                            "sizes": ",".join(_short(p[0]) for p in pts),
                            "slope": float(np.polyfit(x, y, 1)[0])})
    return out


def parse_sizes(text: str) -> list[int]:
    return [int(float(s)) for s in text.split(",") if s.strip()]


def parse_seeds(text: str) -> list[int]:
    """``"0-7"`` or ``"0,3,5"`` (or both, ``"0-2,5"``) as a list of seeds."""
    seeds = []
    for part in (p.strip() for p in text.split(",")):
        if "-" in part:
            first, last = (int(x) for x in part.split("-", 1))
            seeds.extend(range(first, last + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--only", default=",".join(g for g in GROUPS if g != "workloads"),
                    help="groups: challenging,idealloc,synthetic,perfect,workloads")
    ap.add_argument("--instances", default="", help="instance names, e.g. A,B,S_1,uniform-10k")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--budget-ms", type=int, default=1000, help="emel auto/optimal, idealloc and synthetic")
    ap.add_argument("--challenging-budget-ms", type=int, default=10000)
    ap.add_argument("--auto-budgets", default="",
                    help="emel auto at these budgets too (ms, e.g. 500,1000,2000), in a table of the "
                         "smallest budget at which auto is no larger and no slower than the best peer")
    ap.add_argument("--auto-default", action="store_true",
                    help="emel auto at the default too: no time_budget_ms, the default-budget policy")
    ap.add_argument("--optimal-max-buffers", type=int, default=16384,
                    help="run emel optimal on instances up to this size (strategies.md §5 does not "
                         "search above 16,384 buffers)")
    ap.add_argument("--peer-timeout-s", type=float, default=None,
                    help="time limit of every peer search (default: 120 minimalloc, 60 omnimalloc "
                         "supermalloc/annealing)")
    ap.add_argument("--peer-mem-gb", type=float, default=8.0,
                    help="address-space limit of the minimalloc process (0: none)")
    ap.add_argument("--skip-peers", action="store_true", help="emel only")
    ap.add_argument("--scale", action="store_true", help="synthetic traces at 10^6 buffers too")
    ap.add_argument("--synthetic-sizes", default="1e4,1e5")
    ap.add_argument("--perfect-sizes", default="100,300,600,1200", help="buffers of the perfect packings")
    ap.add_argument("--perfect-seeds", default="",
                    help="seeds of the perfect packings (names gain -s<seed>; default: --seed's cut only)")
    ap.add_argument("--workload-sizes", default="21504,103000", help="buffers of the workload traces")
    ap.add_argument("--workload-seeds", default="1", help='seeds of the workload traces, e.g. "1,3" or "1-4"')
    ap.add_argument("--workload-budget-ms", type=int, default=4000, help="emel auto/optimal on the workload traces")
    ap.add_argument("--families", default=",".join(synthetic_traces.FAMILIES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minimalloc", default=None, help="the minimalloc binary")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    args.mm_timeout_s = args.peer_timeout_s if args.peer_timeout_s is not None else 120.0
    args.om_timeout_s = args.peer_timeout_s if args.peer_timeout_s is not None else 60.0
    try:
        args.auto_budgets = sorted({int(b) for b in args.auto_budgets.split(",") if b.strip()})
    except ValueError:
        ap.error(f"--auto-budgets takes budgets in ms separated by commas, not {args.auto_budgets!r}")
    if any(b <= 0 for b in args.auto_budgets):
        ap.error("--auto-budgets must be positive")

    groups = [g for g in args.only.split(",") if g]
    bad = set(groups) - set(GROUPS)
    if bad:
        ap.error(f"unknown groups {sorted(bad)}; choose from {', '.join(GROUPS)}")
    sizes = parse_sizes(args.synthetic_sizes) + ([10**6] if args.scale else [])
    sizes = sorted(set(sizes))
    names = [s for s in args.instances.split(",") if s]
    instances = load_instances(groups, names, sizes, [f for f in args.families.split(",") if f], args.seed,
                               parse_sizes(args.perfect_sizes), parse_sizes(args.workload_sizes),
                               parse_seeds(args.workload_seeds), parse_seeds(args.perfect_seeds))
    if not instances:
        ap.error("no instances selected")

    contenders = emel_contenders(args)
    missing = {}
    if args.skip_peers:
        missing = {"omnimalloc": "--skip-peers", "minimalloc": "--skip-peers"}
    else:
        try:
            import omnimalloc
            contenders += omnimalloc_contenders(args)
            om_version = omnimalloc.__version__
        except ImportError as e:
            missing["omnimalloc"] = f"not importable ({e})"
        mm_bin = find_minimalloc(args.minimalloc)
        if mm_bin:
            contenders.append(minimalloc_contender(mm_bin, args))
        else:
            missing["minimalloc"] = "no binary (--minimalloc, $EMEL_MINIMALLOC or PATH)"

    load_start = os.getloadavg()
    print(f"load average {load_start[0]:.2f} on {os.cpu_count()} CPUs; contenders: "
          + ", ".join(c.name for c in contenders), flush=True)
    all_rows, verdicts, ladders = [], [], []
    for idx, inst in enumerate(instances):
        print(f"== {inst.label}: {len(inst.size):,} buffers, lower bound {inst.bound:,}"
              + (f", capacity {inst.capacity:,}" if inst.capacity else ""), flush=True)
        rows = run_instance(inst, contenders, args.repeats, idx)
        all_rows += rows
        verdicts.append(verdict(rows))
        if args.auto_budgets:
            ladders.append(budget_ladder(rows, {"emel auto": main_budget(args, inst),
                                                **{auto_at(b): b for b in args.auto_budgets}}))

    cols = [("instance", "instance", ""), ("buffers", "buffers", ","), ("contender", "contender", ""),
            ("size", "size", ","), ("ratio", "size/bound", ".4f"), ("seconds", "wall s", ".2f"),
            ("valid", "valid", ""), ("status", "status", "")]
    for g in groups:
        rows = [r for r in all_rows if r["group"] == g]
        if not rows:
            continue
        extra = [("fits", "fits", "")] if g in ("challenging", "workloads") else []
        print(f"\n== {g} (median wall of {args.repeats} run(s); size: the smallest valid answer) ==")
        print_table([{**r, "valid": None if r["valid"] is None else ("yes" if r["valid"] else "NO"),
                      "fits": None if r["fits"] is None else ("yes" if r["fits"] else "no")}
                     for r in rows], cols[:6] + [("valid", "valid", "")] + extra + cols[7:])
    print("\n== per instance: best contender; emel auto against the best peer ==")
    yn = lambda b: None if b is None else ("yes" if b else "no")  # noqa: E731
    print_table([{**v, "auto_size_ok": yn(v.get("auto_size_ok")), "auto_time_ok": yn(v.get("auto_time_ok"))}
                 for v in verdicts],
                [("group", "group", ""), ("instance", "instance", ""), ("best", "best", ""),
                 ("best_ratio", "best/bound", ".4f"), ("best_peer", "best peer", ""),
                 ("peer_ratio", "peer/bound", ".4f"), ("peer_s", "peer s", ".2f"),
                 ("auto_ratio", "auto/bound", ".4f"), ("auto_s", "auto s", ".2f"),
                 ("auto_size_ok", "auto<=peer size", ""), ("auto_time_ok", "auto<=peer time", "")])
    if ladders:
        print("\n== emel auto at each budget against the best peer: size/bound (wall s), "
              "* = no larger and no slower ==")
        shown = []
        for v in ladders:
            row = {"group": v["group"], "instance": v["instance"], "best_peer": v.get("best_peer"),
                   "peer": None if "peer_ratio" not in v else f"{v['peer_ratio']:.4f} ({v['peer_s']:.2f})"}
            for st in v["steps"]:
                row[f"b{st['budget_ms']}"] = (f"{st['ratio']:.4f} ({st['seconds']:.2f})"
                                             + (" *" if st["size_ok"] and st["time_ok"] else ""))
            row["dominates_at"] = None if v.get("dominates_at") is None else f"{v['dominates_at']} ms"
            shown.append(row)
        budgets = sorted({st["budget_ms"] for v in ladders for st in v["steps"]})
        print_table(shown, [("group", "group", ""), ("instance", "instance", ""), ("best_peer", "best peer", ""),
                            ("peer", "peer", "")] + [(f"b{b}", f"auto@{b}ms", "") for b in budgets]
                    + [("dominates_at", "smallest budget *", "")])
    sl = slopes(all_rows, ("emel greedy_by_size", "emel auto", "om greedy_by_size", "om best_fit"))
    if sl:
        print("\n== log-log slope of wall time against buffers (synthetic; 1.0 = linear) ==")
        print_table(sl, [("family", "family", ""), ("contender", "contender", ""),
                         ("sizes", "sizes", ""), ("slope", "slope", ".2f")])
    invalid = [f"{r['group']}/{r['instance']} {r['contender']}" for r in all_rows if r["valid"] is False]
    if invalid:
        print("\nINVALID answers: " + "; ".join(invalid))
    load_end = os.getloadavg()
    print(f"\nload average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end "
          f"({os.cpu_count()} CPUs): wall times are only comparable within one run")
    print("missing peers: " + (", ".join(f"{k} ({v})" for k, v in missing.items()) if missing else "none"))
    write_json("peers", {
        "settings": {"repeats": args.repeats, "budget_ms": args.budget_ms,
                     "challenging_budget_ms": args.challenging_budget_ms, "auto_budgets": args.auto_budgets,
                     "minimalloc_timeout_s": args.mm_timeout_s, "omnimalloc_timeout_s": args.om_timeout_s,
                     "optimal_max_buffers": args.optimal_max_buffers, "seed": args.seed,
                     "synthetic_sizes": sizes, "workload_sizes": args.workload_sizes,
                     "workload_seeds": args.workload_seeds, "workload_budget_ms": args.workload_budget_ms,
                     "load_average": [load_start[0], load_end[0]], "omnimalloc": locals().get("om_version"),
                     "minimalloc": None if "minimalloc" in missing else find_minimalloc(args.minimalloc)},
        "missing": missing,
        "instances": [{"group": i.group, "name": i.name, "buffers": len(i.size), "bound": i.bound,
                       "capacity": i.capacity, "source": i.source} for i in instances],
        "results": all_rows, "verdicts": verdicts, "budget_ladders": ladders, "slopes": sl,
        "invalid": invalid}, args.out)
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())
