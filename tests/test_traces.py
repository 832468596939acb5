"""Allocation traces (docs/determinism.md §6): the golden traces of every
model graph (data/graphs) x mode, regenerated from the core, identical to the reference's
and verified by ``emel-trace verify``; the JSON Lines and CBOR forms; the
CLI's exit codes and first-difference report."""

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import emel
import emel.memory as mm
from emel.memory import examples, reference, trace, trace_cli
from repo_data import GRAPHS

# Subprocesses must import the same emel as this process (the installed
# wheel in CI, python/ in a development checkout).
PACKAGE_ROOT = str(Path(emel.__file__).resolve().parents[1])
ROOT = Path(__file__).resolve().parents[1]


def _golden_module():
    spec = importlib.util.spec_from_file_location("golden_traces", ROOT / "scripts" / "golden_traces.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


golden = _golden_module()
CASES = golden.cases(GRAPHS)


def test_every_model_graph_and_mode_has_a_golden_trace():
    assert len(CASES) == 18
    committed = sorted(p.name for p in golden.GOLDEN.glob("*.jsonl.gz"))
    assert committed == sorted(golden.golden_path(g, m).name for g, m in CASES)


@pytest.mark.parametrize("graph,mode", CASES, ids=[f"{g.stem}-{m}" for g, m in CASES])
def test_golden_trace_matches_and_verifies(graph, mode, capsys):
    assert golden.check(graph, mode) is None   # core == reference == committed file
    path = golden.golden_path(graph, mode)
    assert trace_cli.main(["verify", str(graph), str(path)]) == 0
    assert "OK" in capsys.readouterr().out


def test_verify_as_a_command_and_a_readable_first_difference(tmp_path):
    graph = examples.path("llama-tiny-inference")
    out = tmp_path / "trace.jsonl"
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "emel.memory.trace_cli", *map(str, args)], capture_output=True,
        text=True, env=dict(os.environ, PYTHONPATH=PACKAGE_ROOT))
    assert run("record", graph, "-o", out, "--mode", "forward").returncode == 0
    ok = run("verify", graph, out)
    assert ok.returncode == 0 and ok.stdout.startswith("OK")
    lines = out.read_text().splitlines()
    record = json.loads(lines[7])
    record["offset"] += 128
    lines[7] = json.dumps(record)
    out.write_text("\n".join(lines) + "\n")
    bad = run("verify", graph, out)
    assert bad.returncode == 1
    # The trace is what is expected; the fresh plan is what was got.
    assert f"record 8 (tensor {record['id']!r}), field 'offset': expected {record['offset']}, " \
           f"got {record['offset'] - 128}" in bad.stdout
    other = run("verify", examples.path("resnet18-inference"), out)
    assert other.returncode == 1 and "was recorded from another graph than" in other.stdout
    assert run("verify", graph, tmp_path / "missing.jsonl").returncode == 2


@pytest.mark.parametrize("suffix", [".jsonl", ".cbor", ".jsonl.gz", ".cbor.gz"])
def test_formats_round_trip(tmp_path, suffix):
    graph = examples.path("resnet18-inference")
    path = tmp_path / f"t{suffix}"
    assert trace_cli.main(["record", str(graph), "-o", str(path), "--rank", "1",
                           "--world-size", "2"]) == 0
    records = trace.parse(path.read_bytes())
    expected = trace.trace_records(mm.plan(str(graph), rank=1, world_size=2).to_dict())
    assert records == expected
    data = path.read_bytes()
    raw = gzip.decompress(data) if suffix.endswith(".gz") else data
    assert raw[:1] == (b"{" if ".jsonl" in suffix else b"\x98")   # a CBOR array, 1-byte length
    assert trace_cli.main(["verify", str(graph), str(path)]) == 0


def test_record_layout():
    plan = mm.plan(examples.load("llama-tiny-inference"), strategy="tmmu", mode="backward",
                   replay_token=bytes(range(32)))
    records = trace.trace_records(plan.to_dict())
    header, tensors, summary = records[0], records[1:-1], records[-1]
    assert header["record"] == "allocation_header" and header["format"] == "emel.trace/1"
    assert header["ir_hash"] == plan.hashes["ir_hash"] and header["mode"] == "backward"
    assert header["replay_token_prefix"] == bytes(range(8)).hex()
    assert header["arenas"]["parameters"] == {"alignment": 128, "capacity_bytes": None,
                                              "page_size": 4096, "persistent": True}
    assert [r["id"] for r in tensors] == sorted(plan.tensor_ids)
    assert all(r["record"] == "tensor" for r in tensors)
    assert summary == {"record": "summary", "plan_hash": plan.plan_hash,
                       "tensors": len(plan.tensor_ids),
                       "arena_sizes": {n: a.size for n, a in plan.arenas.items()},
                       "total_bytes": plan.total_bytes,
                       "total_lower_bound": plan.metrics["total_lower_bound"]}
    assert trace.trace_records(reference.plan(examples.load("llama-tiny-inference").to_dict(),
                                              mode="backward", replay_token=bytes(range(32)))) == records


def test_verify_needs_the_token_it_was_recorded_with(tmp_path, capsys):
    graph = str(examples.path("resnet18-inference"))
    path = str(tmp_path / "t.jsonl")
    token = "ab" * 32
    assert trace_cli.main(["record", graph, "-o", path, "--replay-token", token]) == 0
    assert trace_cli.main(["verify", graph, path]) == 1
    assert "replay_token_prefix" in capsys.readouterr().out
    assert trace_cli.main(["verify", graph, path, "--replay-token", token]) == 0
    assert trace_cli.main(["record", graph, "-o", path, "--replay-token", "ab"]) == 2
    assert "exactly 32 bytes" in capsys.readouterr().err
