"""ggml-alloc parity: the shared baselines and llama.cpp's test-alloc cases,
with the exact sizes ggml produces (../shared/ggml-alloc-behaviour.md)."""

import os
from pathlib import Path

import pytest

from emel.memory import ggml as gg

SHARED = Path(__file__).resolve().parents[2] / "shared"


def inp(name, nbytes):
    return gg.Tensor(name, nbytes, flags=gg.INPUT)


def op(name, kind, nbytes, *src):
    return gg.Tensor(name, nbytes, op=kind, src=list(src))


def view(name, parent, nbytes, offs=0, kind="VIEW"):
    root = parent.view_src or parent
    return gg.Tensor(name, nbytes, op=kind, src=[parent], view_src=root,
                     view_offs=parent.view_offs + offs)


def alloc(out, max_size, alignment=8):
    out.flags |= gg.OUTPUT
    ga = gg.GraphAllocator(gg.BufferType(alignment, max_size))
    ga.reserve(gg.build_forward([out]))
    return ga


def chunks(ga, buffer_id=0):
    return ga._buffers[ga._allocator_of[buffer_id]]


def test_max_size_too_many_tensors():
    x0, x1, x2 = inp("x0", 8), inp("x1", 8), inp("x2", 8)
    x3 = op("x3", "MUL", 8, x0, x1)
    x4 = op("x4", "ADD", 8, x1, x2)
    x5 = op("x5", "ADD", 8, x3, x0)
    x6 = op("x6", "ADD", 8, x4, x5)
    ga = alloc(x6, 16)
    assert chunks(ga) == [16, 8] and ga.get_buffer_size(0) == 24
    assert ga.inplace_of["x4"] == "x2"


def test_tensor_larger_than_max_size_gets_its_own_chunk():
    x0 = inp("x0", 24)
    ga = alloc(op("x1", "SCALE", 24, x0), 16)
    assert ga.get_buffer_size(0) == 24 and ga.inplace_of["x1"] == "x0"


def test_max_size_tensor_too_large():
    x0, x1 = inp("x0", 16), inp("x1", 8)
    ga = alloc(op("x2", "CONCAT", 24, x0, x1), 32)
    assert chunks(ga) == [24, 24] and ga.addresses["x2"][1] == 1


def test_not_enough_chunks():
    xs = [inp(f"x{i}", 8) for i in range(17)]
    acc = xs[0]
    for i in range(1, 17):
        acc = op(f"acc{i}", "ADD", 8, acc, xs[i])
    ga = alloc(acc, 8)
    assert ga.get_buffer_size(0) == 15 * 8 + 16
    assert len(chunks(ga)) == 16 and chunks(ga)[-1] == 16


def test_fill_leftover_space():
    x0 = inp("x0", 8)
    x1 = op("x1", "PAD", 16, x0)
    ga = alloc(op("x3", "MEAN", 4, x1), 16)
    assert chunks(ga) == [8, 16] and ga.addresses["x3"][1] == 0


def test_view_inplace_never_goes_through_a_view():
    x0 = inp("x0", 16)
    x1 = view("x1", x0, 16, kind="RESHAPE")
    x2 = view("x2", x1, 16, kind="PERMUTE")
    x3 = view("x3", x2, 8, offs=4)
    x4 = inp("x4", 8)
    ga = alloc(op("x5", "ADD", 8, x3, x4), 32)
    assert ga.get_buffer_size(0) == 24 and ga.inplace_of == {"x5": "x4"}


def test_reuse_and_free():
    x0, x1, x2 = inp("x0", 24), inp("x1", 8), inp("x2", 8)
    x3 = op("x3", "ADD", 8, x1, x2)
    x4 = op("x4", "PAD", 32, x0)
    x5 = op("x5", "SCALE", 32, x4)
    x6 = op("x6", "ADD", 32, x4, x5)
    x7 = view("x7", x6, 8, offs=8)
    ga = alloc(op("x8", "ADD", 8, x3, x7), 40)
    assert chunks(ga) == [40, 32] and ga.get_buffer_size(0) == 72


@pytest.mark.parametrize("max_size", [32, gg.SIZE_MAX])
def test_merge_free_block(max_size):
    x0, x1, x2 = inp("x0", 16), inp("x1", 16), inp("x2", 16)
    x3, x4 = op("x3", "MEAN", 4, x0), op("x4", "MEAN", 4, x1)
    x5 = op("x5", "PAD", 24, x2)
    x6 = op("x6", "ADD", 4, x3, x4)
    x7 = op("x7", "PAD", 24, x6)
    ga = alloc(op("x8", "ADD", 24, x5, x7), max_size)
    assert ga.get_buffer_size(0) == 72


def test_prefer_already_allocated_memory():
    x0 = inp("x0", 24)
    x1 = op("x1", "MEAN", 4, x0)
    ga = alloc(op("x2", "MEAN", 4, x1), 32, alignment=4)
    assert ga.get_buffer_size(0) == 28 and ga.addresses["x2"][2] == 0


def test_buffer_size_zero_for_a_second_unused_buffer():
    a, b = gg.BufferType(8, gg.SIZE_MAX), gg.BufferType(8, gg.SIZE_MAX)
    x0 = inp("x0", 16)
    x1 = op("x1", "SCALE", 16, x0)
    x1.flags |= gg.OUTPUT
    ga = gg.GraphAllocator([a, b])
    graph = gg.build_forward([x1])
    ga.reserve_n(graph, [0] * len(graph.nodes), [0] * len(graph.leafs))
    assert (ga.get_buffer_size(0), ga.get_buffer_size(1)) == (16, 0)


def test_shared_buffer_type_counts_once_and_buffers_only_grow():
    bt = gg.BufferType(8)
    x0 = inp("x0", 64)
    y = op("y", "MEAN", 8, x0)
    y.flags |= gg.OUTPUT
    ga = gg.GraphAllocator([bt, bt])
    ga.reserve(gg.build_forward([y]))
    assert ga.get_buffer_size(0) == 72 and ga.get_buffer_size(1) == 0
    small_in = inp("s", 8)
    small = op("z", "MEAN", 8, small_in)
    small.flags |= gg.OUTPUT
    ga.reserve(gg.build_forward([small]))
    assert ga.get_buffer_size(0) == 72   # a smaller plan keeps the bigger buffer
    assert ga.reserve_n_size(gg.build_forward([small])) == [16, 0]


BASELINE = SHARED / "baselines" / "ggml-alloc.tsv"


@pytest.mark.skipif(not BASELINE.exists() and not os.environ.get("CI"),
                    reason="no ../shared beside the checkout")
def test_shared_graphs_match_ggml_byte_for_byte():
    rows = [l.split("\t") for l in BASELINE.read_text().splitlines()
            if l and not l.startswith("#") and not l.startswith("file")]
    assert len(rows) == 6
    for name, expected, *_ in rows:
        graph, _ = gg.from_emel_graph(SHARED / "graphs" / f"{name}.json")
        ga = gg.GraphAllocator(gg.BufferType(32))
        ga.reserve(graph)
        assert ga.get_buffer_size(0) == int(expected), name
