"""emel-sweep: every graph x mode x strategy, in a fixed order whatever the workers do."""

import json
import shutil

import pytest

import emel.memory as mm
from emel.memory import examples, sweep


@pytest.fixture
def graph_dir(tmp_path):
    for name in ("llama-tiny-inference", "resnet18-inference"):   # the two inference examples
        with examples.path(name).open("rb") as src, open(tmp_path / f"{name}.json", "wb") as dst:
            shutil.copyfileobj(src, dst)
    (tmp_path / "notes.txt").write_text("not a graph")
    return tmp_path


def strip_times(rows):
    return [{k: v for k, v in r.items() if not k.endswith("time_ms")} for r in rows]


def test_rows_in_order_and_equal_with_workers(graph_dir):
    paths = sweep.graph_files(str(graph_dir))
    assert [p.rsplit("/", 1)[1] for p in paths] == ["llama-tiny-inference.json", "resnet18-inference.json"]
    strategies = ["tmmu", "greedy_by_size", "best_fit"]
    serial = sweep.sweep(paths, ["inference", "forward"], strategies, jobs=1, progress=False)
    parallel = sweep.sweep(paths, ["inference", "forward"], strategies, jobs=2, progress=False)
    assert strip_times(serial) == strip_times(parallel)
    assert [(r["graph"], r["mode"], r["strategy"]) for r in serial] == [
        (g, m, s) for g in ("llama-tiny-inference.json", "resnet18-inference.json")
        for m in ("inference", "forward") for s in strategies]
    first = serial[0]
    p = mm.plan(examples.load("llama-tiny-inference"), strategy="tmmu")
    assert first["total_bytes"] == p.total_bytes
    a = p.arenas["activations"]
    assert first["ratio"] == a.size / a.lower_bound          # parameters are persistent: left out


def test_cli_prints_table_and_writes_json(graph_dir, tmp_path, capsys):
    out = tmp_path / "results.json"
    code = sweep.main([str(graph_dir), "--strategies", "tmmu,auto", "--modes", "inference",
                       "-j", "1", "-o", str(out), "--no-progress"])
    assert code == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split() == ["graph", "mode", "tmmu", "auto"]
    assert text[1].startswith("llama-tiny-inference.json  inference")
    assert "4 plans of 2 graphs" in text[-2]
    doc = json.loads(out.read_text())
    assert doc["format"] == "emel.sweep/1" and len(doc["rows"]) == 4
    assert doc["rows"][1]["strategy"] == "auto" and doc["rows"][1]["ratio"] == 1.0


def test_bad_arguments_and_errors_are_rows(graph_dir, tmp_path, capsys):
    with pytest.raises(SystemExit):
        sweep.main([str(graph_dir), "--strategies", "nope"])
    assert "--strategies must be" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.json").write_text('{"format": "emel.graph/1", "tensors": [], "nodes": [1]}')
    assert sweep.main([str(bad), "--strategies", "tmmu", "-j", "1", "--no-progress"]) == 1
    assert "INVALID_IR_SHAPES" in capsys.readouterr().out
    assert sweep.main([str(tmp_path / "missing")]) == 1


def test_dask_cluster_gives_the_same_rows_in_the_same_order(graph_dir, capsys):
    distributed = pytest.importorskip("distributed")
    paths = sweep.graph_files(str(graph_dir))
    strategies = ["tmmu", "best_fit"]
    serial = sweep.sweep(paths, ["inference", "forward"], strategies, progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            on_dask = sweep.sweep(paths, ["inference", "forward"], strategies, client=client,
                                  progress=True)
            pids = set(client.run(lambda: __import__("os").getpid()).values())
        assert len(pids) == 2                               # two worker processes did it
        assert strip_times(on_dask) == strip_times(serial)
        capsys.readouterr()
        assert sweep.main([str(graph_dir), "--strategies", "tmmu", "--no-progress",
                           "--scheduler", cluster.scheduler_address]) == 0
    out = capsys.readouterr().out
    assert "2 Dask workers at tcp://" in out and "llama-tiny-inference.json" in out


def test_scheduler_without_a_cluster_is_one_line(graph_dir, capsys, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr(sweep, "CONNECT_TIMEOUT", "1s")
    assert sweep.main([str(graph_dir), "--scheduler", "tcp://127.0.0.1:9", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("emel-sweep: ") and err.count("\n") == 1
