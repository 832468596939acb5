"""The emel-plan command line and the bundled examples."""

import json
import subprocess
import sys

import emel.memory as mm
from emel.memory import cli, examples


def test_example_summary(capsys):
    assert cli.main(["--example"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("llama-tiny-inference")
    assert "activations" in out and "parameters (persistent)" in out and "MiB" in out
    expected = mm.plan(examples.load()).arenas["activations"].lower_bound
    assert mm.planning.format_bytes(expected) in out   # the lower bound is shown


def test_json_output_matches_api(tmp_path, capsys):
    out_path = tmp_path / "plan.json"
    graph = examples.path("resnet18-inference")
    assert cli.main([str(graph), "--mode", "forward", "--alignment", "32",
                     "--json", str(out_path)]) == 0
    written = json.loads(out_path.read_text())
    assert written == mm.plan(str(graph), mode="forward", alignment=32).to_dict()
    assert written["arenas"]["activations"]["alignment"] == 32
    capsys.readouterr()
    assert cli.main(["--example", "resnet18-inference", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["graph"] == "resnet18-inference-b1"


def test_errors_exit_nonzero_with_the_code(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "emel.graph/1", "tensors": [], "nodes": '
                   '[{"id": "n", "op": "x", "inputs": ["ghost"]}]}')
    assert cli.main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert "INVALID_IR_SHAPES" in err and "ghost" in err
    assert cli.main([str(tmp_path / "missing.json")]) == 1
    assert cli.main(["--example", "no-such-model"]) == 1


def test_python_dash_m_runs():
    done = subprocess.run([sys.executable, "-m", "emel.memory", "--example", "--mode", "backward"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "mode backward" in done.stdout


def test_examples_are_listed_and_valid():
    assert examples.names() == ["llama-tiny-inference", "resnet18-inference"]
    for name in examples.names():
        examples.load(name).validate()


def test_strategy_option_reaches_the_lower_bound(capsys):
    assert cli.main(["--example", "resnet18-inference", "--strategy", "auto", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    act = doc["arenas"]["activations"]
    assert doc["strategy"] == "auto" and act["slots"] is None
    assert act["size"] == act["lower_bound"]  # 6,422,528 bytes: no gap left
    assert cli.main(["--example", "resnet18-inference", "--strategy", "greedy_by_size",
                     "--fit", "first"]) == 0
    out = capsys.readouterr().out
    assert "strategy greedy_by_size" in out and " - " in out
