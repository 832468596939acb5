"""emel.memory.viz: the pictures render and hold the artists they should."""

import io

import numpy as np
import pytest

pytest.importorskip("matplotlib")
from matplotlib.collections import PolyCollection  # noqa: E402

import emel.memory as mm  # noqa: E402
from emel.memory.formats import format_bytes
from emel.memory import examples, viz  # noqa: E402


def small_graph():
    g = mm.Graph(name="chain")
    g.tensor("x", [256], role="input")
    g.tensor("w", [256], role="parameter")
    g.tensor("a", [512])
    g.tensor("b", [1024])
    g.tensor("y", [128], role="output")
    g.node("n0", "f", ["x", "w"], ["a"])
    g.node("n1", "g", ["a"], ["b"])
    g.node("n2", "h", ["b"], ["y"])
    return g


def png_bytes(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def test_live_bytes_and_high_water_by_hand():
    p = mm.plan(small_graph(), strategy="greedy_by_size", alignment=1)
    # x dies at step 0; a lives 0-1; b 1-2; y 2 (output, to the last step).
    assert viz.live_bytes(p, "activations").tolist() == [1024 + 2048, 2048 + 4096, 4096 + 512]
    assert viz.live_bytes(p, "activations").max() == p.arenas["activations"].lower_bound
    top = viz.high_water(p, "activations")
    assert top.tolist() == [max(p.tensors[t].offset + p.tensors[t].size for t in live)
                            for live in (("x", "a"), ("a", "b"), ("b", "y"))]


def test_placement_has_one_rectangle_per_storage_tensor_coloured_by_role():
    p = mm.plan(small_graph(), alignment=1)
    fig = viz.plot_placement(p, "activations", labels=2)
    ax = fig.axes[0]
    polys = {c.get_label(): c for c in ax.collections if isinstance(c, PolyCollection)}
    assert sorted(polys) == ["activation (2)", "input (1)", "output (1)"]
    box = polys["input (1)"].get_paths()[0].vertices
    t = p.tensors["x"]
    assert ax.get_ylabel() == "offset (KiB)"
    assert box[:, 0].min() == t.birth and box[:, 0].max() == t.death + 1
    assert np.isclose(box[:, 1].min() * 1024, t.offset) and np.isclose(box[:, 1].max() * 1024, t.offset + t.size)
    assert [text.get_text() for text in ax.texts] == ["b", "a"]      # largest rectangles first
    assert {round(line.get_ydata()[0] * 1024) for line in ax.lines} == {
        p.arenas["activations"].size, p.arenas["activations"].lower_bound}
    assert png_bytes(fig)[:4] == b"\x89PNG"


def test_roles_come_from_the_plans_graph_or_the_arena():
    p = mm.plan(small_graph(), alignment=1)
    fig = viz.plot_placement(p, "parameters")
    labels = [c.get_label() for c in fig.axes[0].collections]
    assert labels == ["parameter (1)"]
    p.graph = None                                   # no graph: persistent arenas read as parameters
    fig = viz.plot_placement(p, "activations")
    assert [c.get_label() for c in fig.axes[0].collections] == ["activation (4)"]


def test_plan_plot_draws_memory_above_placement():
    g = examples.load("resnet18-inference")
    p = mm.plan(g, strategy="auto")
    fig = p.plot()
    top, bottom = fig.axes
    assert top.get_xlabel() == "execution step" and "over steps" in top.get_title()
    live = top.lines[0].get_ydata()
    unit = top.get_ylabel()
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
    assert np.isclose(max(live) * scale, p.arenas["activations"].lower_bound)
    assert [l.get_label() for l in top.lines] == [
        "live bytes", "placement high-water",
        f"lower bound {format_bytes(p.arenas['activations'].lower_bound)}",
        f"arena size {format_bytes(p.arenas['activations'].size)}",
        f"peak {format_bytes(p.peak('activations').live_bytes)} at step "
        f"{p.peak('activations').step}"]
    # Units in labels, never scientific notation (1.15e+03 KiB)
    assert not any("e+" in text.get_text() for ax in fig.axes for text in ax.texts)
    storage = sum(1 for t in p.tensors.values() if t.arena == "activations" and t.view_of is None)
    assert sum(len(c.get_paths()) for c in bottom.collections) == storage
    assert len(bottom.texts) == 8
    svg = io.BytesIO()
    fig.savefig(svg, format="svg")
    assert b"<svg" in svg.getvalue()[:400]


def test_strategies_side_by_side_share_one_byte_scale():
    g = examples.load("llama-tiny-inference")
    fig = viz.plot_strategies(g, ["tmmu", "greedy_by_size"])
    assert len(fig.axes) == 2
    titles = [ax.get_title() for ax in fig.axes]
    plans = [mm.plan(g, strategy=s) for s in ("tmmu", "greedy_by_size")]
    for title, p in zip(titles, plans):
        a = p.arenas["activations"]
        assert title.startswith(p.strategy) and f"{a.size / a.lower_bound:.3f}× bound" in title
    assert fig.axes[0].get_ylim() == fig.axes[1].get_ylim()
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1  # one, for the row


def test_unknown_arena_is_a_clear_error():
    p = mm.plan(small_graph())
    with pytest.raises(KeyError, match="no arena 'gradients'"):
        viz.plot_placement(p, "gradients")


def test_labels_do_not_cover_each_other():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    g = examples.load("llama-tiny-inference")
    fig = mm.plan(g, strategy="auto").plot(labels=12)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    boxes = [t.get_window_extent(canvas.get_renderer()) for t in fig.axes[1].texts]
    assert len(boxes) == 12
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b)


def test_graph_html_table_counts_roles():
    g = small_graph()
    g.tensor("av", [128], view_of="a")
    rows = {r["role"]: r for r in g.summary_rows()}
    assert rows["activation"] == {"role": "activation", "tensors": 2, "views": 1, "bytes": 6144}
    assert rows["parameter"]["bytes"] == 1024 and "gradient" not in rows
    html = g._repr_html_()
    assert html.startswith("<div><b>Graph</b> chain: 6 tensors, 3 nodes")
    assert "<td>activation</td><td>2</td><td>1</td><td>6.0 KiB</td>" in html


def test_cli_plot_svg_for_a_json_graph(tmp_path, capsys):
    from emel.memory import cli
    path = tmp_path / "chain.json"
    path.write_text(small_graph().to_json())
    svg = tmp_path / "plan.svg"
    assert cli.main([str(path), "--strategy", "auto", "--plot", str(svg)]) == 0
    assert f"plot written to {svg}" in capsys.readouterr().out
    assert b"<svg" in svg.read_bytes()[:400]
    assert cli.main([str(path), "--plot", str(tmp_path / "plan.nope")]) == 1
    assert "cannot write the plot" in capsys.readouterr().err


def test_pictures_name_modules_mark_backward_and_peak_and_keep_legends_outside():
    g = mm.Graph(name="step")
    g.tensor("x", [64], role="input")
    g.tensor("w", [64], role="parameter", module="enc.fc")
    g.tensor("h", [4096], module="enc.fc")
    g.tensor("logits", [65536], module="lm_head")
    g.tensor("loss", [1], role="output")
    g.tensor("gh", [4096], role="gradient", module="enc.fc")
    g.node("fc", "linear", ["x", "w"], ["h"], phase="forward")
    g.node("head", "linear", ["h"], ["logits"], phase="forward")
    g.node("loss", "sum", ["logits"], ["loss"], phase="forward")
    g.node("back", "grad", ["loss", "h"], ["gh"], phase="backward")
    p = mm.plan(g, mode="backward", alignment=1)
    assert viz.backward_start(p) == 3
    assert viz.tensor_labels(p)[p.tensor_ids.index("logits")] == "lm_head"
    fig = p.plot(labels=3)
    top, bottom = fig.axes
    labels = [l.get_label() for l in top.lines]
    assert "backward starts" in labels and any(l.startswith("peak ") for l in labels)
    backward = next(l for l in top.lines if l.get_label() == "backward starts")
    assert list(backward.get_xdata()) == [3, 3]
    note = [t.get_text() for t in top.texts]              # the peak's top tensors, by module
    assert len(note) == 1 and note[0].splitlines()[0].startswith("lm_head")
    assert "lm_head" in [t.get_text() for t in bottom.texts]
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)                        # lays out (constrained layout) before measuring
    for ax in (top, bottom):   # every legend to the right of its axes, off the data
        assert ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
    log = p.plot(log=True)
    assert log.axes[0].get_yscale() == "log" and log.axes[1].get_yscale() == "symlog"


def test_persistent_arena_has_no_empty_memory_panel():
    p = mm.plan(examples.load("resnet18-inference"))
    fig = p.plot(arena="parameters")
    assert len(fig.axes) == 1 and "parameters" in fig.axes[0].get_title()
    # Bars of its largest tensors (not stripes of a placement), the rest in one bar
    ax = fig.axes[0]
    params = sorted((t.size, tid) for tid, t in p.tensors.items()
                    if t.arena == "parameters" and t.view_of is None)
    names = [label.get_text() for label in ax.get_yticklabels()]
    assert p.tensors[names[0]].size == params[-1][0] and names[-1] == f"{len(params) - 8} others"
    widths = sorted(patch.get_width() for patch in ax.patches)
    assert len(ax.patches) == 9 and widths[-1] > 0


def test_labels_stay_inside_the_axes():
    p = mm.plan(examples.load("llama-tiny-inference"))
    fig = p.plot(labels=20)
    fig.canvas.draw()
    for ax in fig.axes[1:]:
        box = ax.get_window_extent()
        for text in ax.texts:
            inner = text.get_window_extent()
            assert box.x0 - 1 <= inner.x0 and inner.x1 <= box.x1 + 1, text.get_text()
