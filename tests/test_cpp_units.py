"""The C++ unit tests of tests/cpp/ (placed index, failed-states table, the
exact search's preorder race, greedy_by_size's order), run from the Python
suite so that CI runs them.

They are built here with the system C++ compiler against the installed C
library (emel.memory.native), in a few seconds: the two header-only parts
(placement/placed_index.hpp, failed_states.hpp) from src/, with the worker
pool the index may fill its rows on (placement/worker_pool.cpp) and the
orders (placement/orders.cpp), the race through emel_place_ex. A CMake build of them (cmake -DEMEL_BUILD_CPP_TESTS=ON) is run
instead when EMEL_CPP_TESTS_BIN names its emel_cpp_tests binary."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from emel.memory import native

ROOT = Path(__file__).resolve().parents[1]
PLACEMENT = ROOT / "src" / "emel" / "memory" / "placement"
SOURCES = [*sorted((ROOT / "tests" / "cpp").glob("*.cpp")), PLACEMENT / "worker_pool.cpp", PLACEMENT / "orders.cpp"]
#: Every TEST of tests/cpp/: a test that stops being registered (or built) fails here.
EXPECTED = {
    "failed_states_remembers_a_failure_within_its_run",
    "failed_states_keeps_committed_failures_for_their_capacity_and_below",
    "failed_states_a_new_failure_takes_its_slot_over",
    "failed_states_commit_visits_every_slot_once_the_run_wrote_more",
    "placed_index_dense_times_match_brute_force",
    "placed_index_sparse_times_match_brute_force",
    "placed_index_mixed_lifetimes_match_brute_force",
    "placed_index_ignores_never_live_and_unplaced_rows",
    "span_sorter_orders_by_offset",
    "gap_finder_first_fit_takes_the_lowest_gap_best_fit_the_tightest",
    "gap_finder_aligns_inside_gaps",
    "gap_finder_throws_placement_overflow_past_2_64",
    "preorder_race_answer_is_the_same_on_threads_turns_or_restarts",
    "preorder_race_reaches_the_peak_when_it_can_be_reached",
    "order_by_size_radix_and_comparison_agree_with_the_rule",
}


def _build(tmp_path):
    binary = os.environ.get("EMEL_CPP_TESTS_BIN")
    if binary:
        assert os.path.isfile(binary), f"EMEL_CPP_TESTS_BIN: no {binary}"
        return binary
    found = next(filter(None, map(shutil.which, ("c++", "g++", "clang++"))), None)
    cxx = os.environ["CXX"].split() if os.environ.get("CXX") else [found] if found else None
    if cxx is None:
        if os.environ.get("CI"):
            pytest.fail("no C++ compiler found (set CXX)")
        pytest.skip("no C++ compiler found (set CXX or install g++ / clang++)")
    library = native.library_path()
    out = tmp_path / "emel_cpp_tests"
    cmd = [*cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread",
           f"-I{ROOT / 'src'}", f"-I{native.include_dir()}", f"-I{ROOT / 'tests' / 'cpp'}",
           *map(str, SOURCES), library, f"-Wl,-rpath,{os.path.dirname(library)}", "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return str(out)


def test_cpp_unit_tests_pass(tmp_path):
    binary = _build(tmp_path)
    done = subprocess.run([binary], capture_output=True, text=True, timeout=120)
    passed = set(re.findall(r"^ok   (\w+)$", done.stdout, re.M))
    failed = set(re.findall(r"^FAIL (\w+)$", done.stdout, re.M))
    assert done.returncode == 0 and not failed, done.stdout[-4000:]
    assert passed == EXPECTED, (sorted(EXPECTED - passed), sorted(passed - EXPECTED))
    assert f"{len(EXPECTED)} tests, 0 failed, 0 failed checks" in done.stdout
