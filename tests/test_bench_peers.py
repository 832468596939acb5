"""bench/peers.py's placement checker and lower bound, bench/synthetic_traces.py's generators,
and the capacity bench/settle_rate.py poses.

Needs neither OmniMalloc nor MiniMalloc (the bench imports them only when it runs them)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import peers  # bench/ is on pytest's pythonpath (pyproject.toml)
import synthetic_traces

# Five buffers: rows 1 and 3 are live together over [4, 6) and share bytes [150, 200).
LOWER = np.array([0, 2, 5, 4, 6])
UPPER = np.array([5, 8, 6, 9, 7])
SIZE = np.array([100, 100, 50, 100, 0])
GOOD = np.array([0, 100, 0, 200, 100])      # row 2 reuses row 0's bytes at t=5 (half-open)
BAD = np.array([0, 100, 0, 150, 100])       # row 3 moved down onto row 1


def test_good_placement_passes():
    chk = peers.check_placement(LOWER, UPPER, SIZE, GOOD)
    assert chk.valid and chk.overlaps == [] and chk.problems == []
    assert chk.max_end == 300
    assert peers.overlapping_pairs_bruteforce(LOWER, UPPER, SIZE, GOOD) == []


def test_bad_placement_names_the_pair():
    chk = peers.check_placement(LOWER, UPPER, SIZE, BAD)
    assert not chk.valid
    assert chk.overlaps == [(1, 3)]
    assert peers.overlapping_pairs_bruteforce(LOWER, UPPER, SIZE, BAD) == [(1, 3)]


def test_overlap_with_a_row_that_is_not_the_nearest_below():
    # Row 0 spans [0, 1000); rows 1 and 2 sit inside it: both overlap row 0, not each other.
    lower, upper, size = np.array([0, 1, 2]), np.array([10, 10, 10]), np.array([1000, 10, 10])
    chk = peers.check_placement(lower, upper, size, np.array([0, 500, 600]))
    assert chk.overlaps == [(0, 1), (0, 2)]


def test_zero_bytes_never_live_negative_capacity_and_reported_size():
    lower, upper, size = np.array([0, 0, 3]), np.array([5, 5, 3]), np.array([10, 0, 10])
    # A zero-byte row and a never-live row may sit anywhere.
    assert peers.check_placement(lower, upper, size, np.array([0, 5, 0])).valid
    neg = peers.check_placement(lower, upper, size, np.array([-4, 0, 0]))
    assert not neg.valid and neg.negative == [0]
    over = peers.check_placement(lower, upper, size, np.array([0, 0, 0]), capacity=5)
    assert over.valid and over.over_capacity and over.max_end == 10
    short = peers.check_placement(lower, upper, size, np.array([0, 0, 0]), reported_size=8)
    assert not short.valid


def test_checker_agrees_with_all_pairs_on_random_placements():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        lower = rng.integers(0, 10, n)
        upper = lower + rng.integers(0, 5, n)
        size = rng.integers(0, 5, n)
        offsets = rng.integers(0, 12, n)
        chk = peers.check_placement(lower, upper, size, offsets)
        pairs = peers.overlapping_pairs_bruteforce(lower, upper, size, offsets)
        assert chk.valid == (not pairs)
        assert set(chk.overlaps) <= set(pairs)


def test_lower_bound_half_open():
    # [0,5) and [5,9) never live together; the [3,3) row is never live.
    assert peers.lower_bound([0, 5, 3], [5, 9, 3], [10, 20, 100]) == 20
    assert peers.lower_bound([0, 4], [5, 9], [10, 20]) == 30
    assert peers.lower_bound([], [], []) == 0


@pytest.mark.parametrize("family", synthetic_traces.FAMILIES)
def test_synthetic_traces_deterministic(family):
    a = synthetic_traces.generate(family, 5000, seed=3)
    b = synthetic_traces.generate(family, 5000, seed=3)
    c = synthetic_traces.generate(family, 5000, seed=4)
    for x, y in zip(a, b):
        assert x.dtype == np.int64 and np.array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(a, c))
    lower, upper, size = a
    assert len(lower) == len(upper) == len(size) == 5000
    assert (lower < upper).all() and (size >= 1).all() and (lower >= 0).all()
    assert [len(x) for x in synthetic_traces.generate(family, 37, seed=0)] == [37] * 3


def test_emel_answer_checks_out():
    mm = pytest.importorskip("emel.memory")
    lower, upper, size = synthetic_traces.generate("transformer", 2000, seed=1)
    p = mm.place(lower, upper, size, strategy="greedy_by_size")
    chk = peers.check_placement(lower, upper, size, p.offsets, reported_size=p.size)
    assert chk.valid and chk.max_end == p.size
    assert peers.lower_bound(lower, upper, size) == p.lower_bound


def _row(contender, peer, size, seconds, valid=True):
    return {"instance": "J", "group": "challenging", "contender": contender, "peer": peer, "size": size,
            "ratio": size / 1000, "seconds": seconds, "valid": valid}


def test_budget_ladder_finds_the_smallest_budget_no_larger_and_no_slower():
    rows = [_row("minimalloc", "minimalloc", 1060, 0.8),
            _row("om greedy_by_size", "omnimalloc", 1300, 0.01),
            _row("om supermalloc", "omnimalloc", 1060, 5.0),   # as small, slower: not the best peer
            _row("om broken", "omnimalloc", 900, 0.01, valid=False),  # invalid answers never count
            _row("emel auto@250ms", "emel", 1070, 0.1),         # faster, larger
            _row("emel auto@1000ms", "emel", 1060, 0.8),        # the first that is both (ties count)
            _row("emel auto", "emel", 1050, 1.4)]               # smaller, slower
    budgets = {"emel auto": 4000, "emel auto@250ms": 250, "emel auto@1000ms": 1000}
    v = peers.budget_ladder(rows, budgets)
    assert v["best_peer"] == "minimalloc" and v["peer_s"] == 0.8
    assert [s["budget_ms"] for s in v["steps"]] == [250, 1000, 4000]
    assert [(s["size_ok"], s["time_ok"]) for s in v["steps"]] == [(False, True), (True, True), (True, False)]
    assert v["dominates_at"] == 1000
    # No budget is both: none is named.
    slow = [r if r["peer"] != "emel" else {**r, "seconds": r["seconds"] + 1} for r in rows]
    assert peers.budget_ladder(slow, budgets)["dominates_at"] is None
    # No valid peer answer: nothing to compare against.
    alone = [r for r in rows if r["peer"] == "emel"]
    assert "best_peer" not in peers.budget_ladder(alone, budgets)


def test_auto_budgets_are_parsed_and_checked():
    with pytest.raises(SystemExit):
        peers.main(["--skip-peers", "--auto-budgets", "500,x", "--instances", "none"])
    with pytest.raises(SystemExit):
        peers.main(["--skip-peers", "--auto-budgets", "0"])


def test_auto_default_runs_the_policy(tmp_path):
    """--auto-default adds emel's default call (no time_budget_ms: the policy) beside the peers,
    with the answer and work of place() at its defaults (and the instance's capacity)."""
    mm = pytest.importorskip("emel.memory")
    import json
    out = tmp_path / "peers.json"
    peers.main(["--skip-peers", "--only", "challenging", "--instances", "C", "--auto-default", "--out", str(out)])
    rows = [r for r in json.loads(out.read_text())["results"] if r["contender"] == "emel auto (default)"]
    inst = peers.load_instances(["challenging"], ["C"], [], [], 0)[0]
    p = mm.place(inst.lower, inst.upper, inst.size, capacity=inst.capacity)
    assert len(rows) == 1 and rows[0]["size"] == p.size and rows[0]["runs"][0]["work"] == p.work


def test_settle_rate_poses_each_solver_the_capacity_asked(tmp_path):
    # A stand-in for the MiniMalloc binary that logs its arguments and answers
    # as MiniMalloc does when out of time. bench/settle_rate.py once posed the
    # file's capacity (1,048,576) instead of the one asked.
    pytest.importorskip("emel.memory")
    import json
    import settle_rate
    log = tmp_path / "args.txt"
    fake = tmp_path / "minimalloc"
    fake.write_text(f"#!{sys.executable}\nimport sys\nopen({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                    "sys.stderr.write('DEADLINE_EXCEEDED: out of time\\n'); sys.exit(1)\n")
    fake.chmod(0o755)
    out = tmp_path / "settle.json"
    # Capacities above greedy's 1.309 of the bound: emel settles both at once.
    assert settle_rate.main(["--instances", "D", "--points", "2", "--from", "1.32", "--to", "1.33",
                             "--seconds", "0.2", "--minimalloc", str(fake), "--out", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    capacities = sorted({r["capacity"] for r in records})
    bound = records[0]["bound"]
    assert capacities == [int(bound * 1.32), int(bound * 1.33)]
    asked = sorted(int(a.split("=")[1]) for line in log.read_text().splitlines()
                   for a in line.split() if a.startswith("--capacity="))
    assert asked == capacities
    for r in records:
        if r["solver"] == "emel":
            assert r["settled"] and r["size"] <= r["capacity"]
        if r["solver"] == "minimalloc":
            assert not r["settled"] and r["status"] == "timeout"


def test_perfect_seeds_name_each_cut_and_its_seed():
    assert peers.parse_seeds("0-2,5") == [0, 1, 2, 5]
    many = peers.load_instances(["perfect"], [], [], [], 0, [100], perfect_seeds=[1, 3])
    assert [i.name for i in many] == [f"{k}-100-s{s}" for k in ("guillotine", "pinwheel", "mixed") for s in (1, 3)]
    assert "seed=3" in many[1].source
    one = peers.load_instances(["perfect"], [], [], [], 4, [100])    # --seed's cut keeps the bare name
    assert [i.name for i in one] == ["guillotine-100", "pinwheel-100", "mixed-100"] and "seed=4" in one[0].source


def test_default_budget_names_each_seed_and_counts_the_slow(tmp_path, capsys):
    """bench/default_budget.py --seeds runs the seeded groups once per seed, each row named with
    its seed, on the families asked, and counts the default calls over 2 s."""
    mm = pytest.importorskip("emel.memory")
    import json
    import default_budget
    out = tmp_path / "db.json"
    default_budget.main(["--groups", "synthetic", "--families", "bursty", "--sizes", "1200", "--seeds", "0-1",
                         "--budgets", "default", "--out", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [r["instance"] for r in rows] == ["synthetic/bursty-1200-s0", "synthetic/bursty-1200-s1"]
    lower, upper, size = synthetic_traces.bursty(1200, 1)
    assert rows[1]["runs"]["default"]["size"] == mm.place(lower, upper, size).size
    assert "default over 2 s (up to 10^5 buffers; the target: none): " in capsys.readouterr().out
