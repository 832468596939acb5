"""The emel-plan command line and the bundled examples."""

import json
import os
import subprocess
import sys

import pytest

import emel.memory as mm
from emel.memory import cli, examples
from emel.memory.formats import format_bytes


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
    assert examples.names() == ["llama-tiny-inference", "llama-tiny-training", "resnet18-inference"]
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


def _dyn_doc():
    """x[seq, 64] -> relu -> y[seq, 64], with w[64, 64] a parameter; seq in [1, 512]."""
    seq = {"sym": "seq", "min": 1, "max": 512}
    return {"format": "emel.graph/1", "name": "dyn",
            "tensors": [
                {"id": "w", "shape": [64, 64], "dtype": "float32", "role": "parameter"},
                {"id": "x", "shape": [dict(seq), 64], "dtype": "float32", "role": "input"},
                {"id": "y", "shape": [dict(seq), 64], "dtype": "float32", "role": "output"}],
            "nodes": [{"id": "mm", "op": "mm", "inputs": ["x", "w"], "outputs": ["y"]}]}


def test_determinism_options_plan_the_ranks_share(tmp_path, capsys):
    graph = tmp_path / "dyn.json"
    graph.write_text(json.dumps(_dyn_doc()))
    spec_file = tmp_path / "spec.json"
    spec_file.write_text('{"w": 0}')
    token = bytes(range(32))
    assert cli.main([str(graph), "--rank", "1", "--world-size", "4", "--shard-spec", str(spec_file),
                     "--replay-token", token.hex(), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    expected = mm.plan(_dyn_doc(), rank=1, world_size=4, shard_spec={"w": 0}, replay_token=token)
    assert doc == expected.to_dict()
    assert doc["tensors"]["w"]["size"] == 16 * 64 * 4       # a quarter of w's 64 rows
    assert doc["rank"] == 1 and doc["world_size"] == 4 and doc["replay_token"] == token.hex()
    # JSON text works as well as a file; the summary names the rank and the plan hash
    assert cli.main([str(graph), "--rank", "1", "--world-size", "4", "--shard-spec", '{"w": 0}',
                     "--replay-token", token.hex()]) == 0
    out = capsys.readouterr().out
    assert "rank 1 of 4" in out
    assert out.rstrip().endswith(f"plan hash {expected.plan_hash}")


def test_summary_prints_the_plan_hash(capsys):
    assert cli.main(["--example", "--strategy", "best_fit", "--time-budget-ms", "50"]) == 0
    expected = mm.plan(examples.load(), strategy="best_fit", time_budget_ms=50).plan_hash
    assert capsys.readouterr().out.splitlines()[-1] == f"plan hash {expected}"


def test_bad_determinism_options_are_refused(tmp_path, capsys):
    for bad, words in ((["--replay-token", "ab"], "exactly 32 bytes"),
                       (["--replay-token", "zz" * 32], "64 hexadecimal digits"),
                       (["--shard-spec", "{w: 0}"], "not valid JSON"),
                       (["--shard-spec", str(tmp_path / "none.json")], "no such file"),
                       (["--shard-spec", "[1]"], "no such file"),
                       (["--shape", "seq"], "SYM=N")):
        with pytest.raises(SystemExit) as info:
            cli.main(["--example", *bad])
        assert info.value.code == 2
        assert words in capsys.readouterr().err, bad
    # an out-of-range rank is the planner's refusal: exit status 1 with the code
    assert cli.main(["--example", "--rank", "2", "--world-size", "2"]) == 1
    assert "[INVALID_IR_SHAPES]" in capsys.readouterr().err


def test_shape_plans_one_point_of_the_envelope(tmp_path, capsys):
    graph = tmp_path / "dyn.json"
    graph.write_text(json.dumps(_dyn_doc()))
    assert cli.main([str(graph), "--shape", "seq=100", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tensors"]["x"]["size"] == 100 * 64 * 4
    concrete = _dyn_doc()
    for t in concrete["tensors"]:
        t["shape"] = [100 if isinstance(d, dict) else d for d in t["shape"]]
    assert doc == mm.plan(concrete).to_dict()
    # without --shape: the envelope's maximum
    assert cli.main([str(graph), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["tensors"]["x"]["size"] == 512 * 64 * 4
    # outside the envelope, or an unknown symbol: exit status 1 with the code and the tensor
    assert cli.main([str(graph), "--shape", "seq=513"]) == 1
    err = capsys.readouterr().err
    assert "[SHAPE_ENVELOPE_EXCEEDED]" in err and "513" in err and "[1, 512]" in err and "'x'" in err
    assert cli.main([str(graph), "--shape", "seq=0"]) == 1
    assert "[SHAPE_ENVELOPE_EXCEEDED]" in capsys.readouterr().err
    assert cli.main([str(graph), "--shape", "batch=2"]) == 1
    assert "unknown symbol 'batch'" in capsys.readouterr().err


# -- the first answer is the best one, and what is above the peak is explained --------------

def test_the_default_is_auto_at_the_bound_and_tmmu_is_explained(capsys):
    assert cli.main(["--example"]) == 0
    out = capsys.readouterr().out
    assert "strategy auto" in out and "note:" not in out
    activations = next(line for line in out.splitlines() if line.startswith("activations"))
    assert activations.split()[5] == "1.000"                      # size / bound
    assert cli.main(["--example", "--strategy", "tmmu"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "activations is 1.256x its lower bound" in notes[0]
    assert "--strategy auto" in notes[0]


def test_training_totals_pool_by_default_and_separate_arenas_is_explained(capsys):
    pooled = mm.plan(examples.load("llama-tiny-training"), mode="backward")
    live = pooled.peak(top=0).live_bytes
    assert "gradients" not in pooled.arenas and pooled.total_bytes <= 1.01 * live
    separate = mm.plan(examples.load("llama-tiny-training"), mode="backward", arena_layout="separate")
    assert separate.arenas["gradients"].size > 0 and separate.total_bytes > 1.3 * live
    assert pooled.options["role_arenas"] == {"gradient": "activations"}
    assert separate.options["role_arenas"] == {} and separate.options["strategy"] == "auto"
    assert cli.main(["--example", "llama-tiny-training", "--mode", "backward", "--separate-arenas"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes == [f"note: total {format_bytes(separate.total_bytes)} is "
                     f"{separate.total_bytes / live:.3f}x the {format_bytes(live)} live at the peak "
                     f"over all arenas: activations, gradients each peak at their own step; pooled "
                     f"arenas (the default: drop --separate-arenas) plan them as one"]
    with pytest.raises(ValueError, match="arena_layout must be one of pooled, separate"):
        mm.plan(examples.load("llama-tiny-training"), arena_layout="shared")


def test_alignment_padding_is_explained():
    g = mm.Graph(name="tiny")
    for i in range(40):                        # forty 4-byte parameters, each on a 128-byte boundary
        g.tensor(f"w{i}", [1], role="parameter")
    g.tensor("x", [64], role="input")
    g.tensor("y", [64], role="output")
    g.node("f", "sum", ["x"] + [f"w{i}" for i in range(40)], ["y"])
    p = mm.plan(g)
    notes = cli.overhead_notes(p)
    assert len(notes) == 1 and "alignment padding" in notes[0] and "128-byte" in notes[0]
    assert cli.overhead_notes(mm.plan(g, alignment=1)) == []


def test_the_mode_probably_meant_is_named(capsys):
    assert cli.main(["--example", "llama-tiny-training"]) == 0
    out = capsys.readouterr().out
    assert "is a training step (106 gradients, 130 tensors saved for backward) planned in " \
           "inference mode" in out and "--mode backward" in out
    assert cli.main(["--example", "--mode", "backward"]) == 0
    assert "--mode inference is probably meant" in capsys.readouterr().out
    assert cli.main(["--example", "llama-tiny-training", "--mode", "backward"]) == 0
    assert "probably" not in capsys.readouterr().out and "note:" not in capsys.readouterr().out


def test_frictions_of_a_first_session(tmp_path, capsys, monkeypatch):
    # an unknown example: one line, no stray quotes around the message
    assert cli.main(["--example", "gpt2"]) == 1
    assert capsys.readouterr().err.startswith("emel-plan: no bundled example 'gpt2'; available: ")
    # a torch.save file is recognised and pointed to the torch importer
    pt = tmp_path / "model.pt"
    pt.write_bytes(b"PK\x03\x04" + bytes(60))
    assert cli.main([str(pt)]) == 1
    assert "looks like a PyTorch file" in capsys.readouterr().err
    # print(plan) under auto says what the search proved, not which internal pass won
    text = repr(mm.plan(examples.load("llama-tiny-inference")))
    assert "activations=31.8 MiB (optimal)" in text and "fit" not in text
    # --help texts point nowhere a pip user cannot follow
    from emel.memory import fit, import_cli, sweep, trace_cli
    for main in (cli.main, fit.main, import_cli.main, sweep.main, trace_cli.main):
        with pytest.raises(SystemExit):
            main(["--help"])
        assert "docs/" not in capsys.readouterr().out
    # an unreachable Dask scheduler: one line asking whether it runs
    def no_answer(address):
        raise OSError(f"Timed out trying to connect to {address} after 30 s")
    monkeypatch.setattr(sweep, "connect", no_answer)
    (tmp_path / "g").mkdir()
    with examples.path("resnet18-inference").open("rb") as src:
        (tmp_path / "g" / "r.json").write_bytes(src.read())
    assert sweep.main([str(tmp_path / "g"), "--scheduler", "tcp://127.0.0.1:1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "is `dask scheduler` running there" in err and err.count("\n") == 1


# ---------------------- hostile paths and arguments: pipes, /dev/zero, deep JSON (issue 31)

def _one_line_exit(main, argv, code, capsys, needle):
    """main(argv) ends with ``code`` (returned, or by argparse's SystemExit) and
    one line on stderr holding ``needle``: no traceback."""
    try:
        got = main(argv)
    except SystemExit as e:
        got = e.code
    err = capsys.readouterr().err
    assert got == code, err
    assert "Traceback" not in err and needle in err.strip().splitlines()[-1], err


def test_deeply_nested_shard_spec_is_one_line(tmp_path, capsys):
    """Issue 31: a deeply nested --shard-spec was a RecursionError traceback."""
    from emel.memory import trace_cli
    deep = '{"a": ' * 200_000 + "0" + "}" * 200_000
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(deep)
    graph = str(examples.path("llama-tiny-inference"))
    for spec in (deep, str(spec_file)):
        _one_line_exit(cli.main, [graph, "--shard-spec", spec], 2, capsys, "nests JSON too deeply")
        _one_line_exit(trace_cli.main, ["record", graph, "-o", str(tmp_path / "t.jsonl"),
                                        "--shard-spec", spec], 2, capsys, "nests JSON too deeply")


def test_unwritable_output_paths_are_refused_before_the_work(tmp_path, capsys, monkeypatch):
    """Issue 31: --json / -o into a missing directory was a FileNotFoundError
    traceback after all the work; now a bad argument (exit 2) before any plan."""
    from emel.memory import fit, import_cli, planning, sweep, trace_cli

    def no_planning(*args, **kwargs):
        raise AssertionError("planned before checking the output path")
    monkeypatch.setattr(planning._core, "plan_graph", no_planning, raising=False)
    for module in (cli, fit, sweep, trace_cli):
        monkeypatch.setattr(module, "plan", no_planning, raising=False)
    graph = str(examples.path("llama-tiny-inference"))
    symbolic = tmp_path / "sym.json"
    symbolic.write_text(json.dumps({"format": "emel.graph/1", "tensors": [
        {"id": "x", "shape": [{"sym": "b", "max": 4}], "dtype": "uint8", "role": "input"},
        {"id": "y", "shape": [{"sym": "b", "max": 4}], "dtype": "uint8", "role": "output"}],
        "nodes": [{"id": "n", "op": "copy", "inputs": ["x"], "outputs": ["y"]}]}))
    missing = str(tmp_path / "no" / "such" / "out.json")
    _one_line_exit(cli.main, [graph, "--json", missing], 2, capsys, "no directory")
    _one_line_exit(cli.main, [graph, "--plot", str(tmp_path)], 2, capsys, "is a directory")
    _one_line_exit(fit.main, [str(symbolic), "--budget", "1KiB", "--dim", "b", "--json", missing],
                   2, capsys, "no directory")
    _one_line_exit(sweep.main, [str(tmp_path), "-o", missing], 2, capsys, "no directory")
    _one_line_exit(trace_cli.main, ["record", graph, "-o", missing], 2, capsys, "no directory")
    _one_line_exit(import_cli.main, ["x.onnx", "-o", missing], 2, capsys, "no directory")


SPECIAL_FILE_RUNS = [
    (["emel.memory.cli", "/dev/zero"], 1),
    (["emel.memory.fit", "/dev/zero", "--budget", "1GiB", "--dim", "b"], 1),
    (["emel.memory.trace_cli", "record", "/dev/zero", "-o", "-"], 2),
    (["emel.memory.trace_cli", "verify", "GRAPH", "/dev/zero"], 2),
    (["emel.memory.import_cli", "/dev/zero"], 1),
    (["emel.memory.cli", "GRAPH", "--shard-spec", "/dev/zero"], 2),
]


@pytest.mark.parametrize("argv,code", SPECIAL_FILE_RUNS, ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_special_files_are_refused_not_read(argv, code):
    """Issue 31: /dev/zero was read without end until memory ran out. Run in a
    child with a time-out and a 2 GiB address-space limit, so the unfixed code
    fails this test instead of the machine."""
    import resource
    graph = str(examples.path("llama-tiny-inference"))
    argv = [a.replace("GRAPH", graph) for a in argv]
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (2**31, 2**31))  # noqa: E731
    run = "import importlib, sys; importlib.import_module(sys.argv.pop(1)).entry()"
    out = subprocess.run([sys.executable, "-c", run, *argv], capture_output=True, text=True,
                         timeout=120, preexec_fn=limit)
    assert out.returncode == code, out.stderr
    # one line (after argparse's usage, for a bad argument), no traceback
    assert "Traceback" not in out.stderr, out.stderr
    assert "/dev/zero is not a regular file" in out.stderr.strip().splitlines()[-1], out.stderr


def test_fifos_and_oversized_files_are_refused(tmp_path, monkeypatch):
    """Issue 31: a pipe is never opened (open() would block), and a file past
    MAX_INPUT_BYTES is refused before it is read."""
    from emel.memory import graph as graph_module
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(mm.PlanError, match="not a regular file") as e:
        mm.load_graph(str(fifo))
    assert e.value.code == "INVALID_IR_SHAPES"
    with pytest.raises(mm.PlanError, match="not a regular file"):
        mm.read_buffers_csv(str(tmp_path))
    big = tmp_path / "big.json"
    big.write_text(examples.path("llama-tiny-inference").read_text())
    monkeypatch.setattr(graph_module, "MAX_INPUT_BYTES", 100)
    with pytest.raises(mm.PlanError, match="more than the 100 B an input may"):
        mm.load_graph(str(big))


def test_reading_an_input_reserves_its_size_not_the_bound(tmp_path):
    """read(MAX_INPUT_BYTES + 1) reserved 4 GiB for every file: under a 1 GiB
    address-space limit any graph failed to load (and under ASan each read
    took half a second, found by the cli fuzz surface's speed)."""
    graph = examples.path("llama-tiny-inference")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30)); "
            "from emel.memory.graph import read_input_file; "
            "print(len(read_input_file(sys.argv[1])))")
    out = subprocess.run([sys.executable, "-c", code, str(graph)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and int(out.stdout) == graph.stat().st_size, out.stderr
