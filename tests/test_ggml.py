"""ggml-alloc parity: the ggml-alloc baselines (data/baselines) and llama.cpp's test-alloc cases,
with the exact sizes ggml produces (docs/ggml.md)."""


import pytest

from emel.memory import PlanError
from emel.memory import ggml as gg

from repo_data import GGML_BASELINE as BASELINE, graph_path


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
    return ga.get_chunk_sizes(buffer_id)


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
    assert ga.reserve_n_size(gg.build_forward([small])) == [16, 16]   # no dedupe here
    assert ga.get_buffer_size(0) == 72   # a plan that fits keeps the buffer
    big_in = inp("b", 128)
    big = op("w", "MEAN", 8, big_in)
    big.flags |= gg.OUTPUT
    assert ga.reserve_n_size(gg.build_forward([big])) == [136, 136]
    assert ga.get_buffer_size(0) == 0    # outgrown: freed, not reallocated
    assert ga.needs_realloc(gg.build_forward([big]))


def test_model_graphs_match_ggml_byte_for_byte():
    rows = [l.split("\t") for l in BASELINE.read_text().splitlines()
            if l and not l.startswith("#") and not l.startswith("file")]
    assert len(rows) == 6
    for name, expected, *_ in rows:
        graph, _ = gg.from_emel_graph(graph_path(name))
        ga = gg.GraphAllocator(gg.BufferType(32))
        ga.reserve(graph)
        assert ga.get_buffer_size(0) == int(expected), name


def test_tensor_allocator_is_linear_and_refuses_overflow():
    ta = gg.TensorAllocator(64, gg.BufferType(32))
    a, b, c = gg.Tensor("a", 1), gg.Tensor("b", 31), gg.Tensor("c", 1)
    assert ta.alloc(a) == 0 and ta.alloc(b) == 32 and ta.offset == 64
    assert b.address == (0, 0, 32)
    with pytest.raises(Exception) as info:   # 64 + 32 > 64: out of space, never a wrap
        ta.alloc(c)
    assert getattr(info.value, "code", None) == "ARENA_TOO_SMALL" and "'c'" in str(info.value)


def test_alloc_ctx_tensors_splits_at_max_size():
    bt = gg.BufferType(32, 64)
    ts = [gg.Tensor("w0", 16), gg.Tensor("w1", 40), gg.Tensor("w2", 100), gg.Tensor("w3", 8)]
    view = gg.Tensor("v", 8, op="VIEW", view_src=ts[1], view_offs=8)
    # padded to 32, 64, 128, 32; a buffer closes when the next tensor would pass 64,
    # and the 128-byte tensor gets a buffer of its own
    assert gg.alloc_ctx_tensors_size(ts + [view], bt) == 256
    assert gg.alloc_ctx_tensors(ts + [view], bt) == [32, 64, 128, 32]
    assert [t.address for t in ts] == [(0, 0, 0), (1, 0, 0), (2, 0, 0), (3, 0, 0)]
    assert view.address == (1, 0, 8) and all(t.flags & gg.HAS_DATA for t in ts)


def test_alloc_ctx_tensors_skips_bound_tensors_and_binds_later_views():
    bt = gg.BufferType(16)
    w0, w1 = gg.Tensor("w0", 20), gg.Tensor("w1", 8)
    # the size query binds nothing
    assert gg.alloc_ctx_tensors_size([w0, w1], bt) == 48
    assert (w0.address, w1.address, w0.flags, w1.flags) == (None, None, 0, 0)
    assert gg.alloc_ctx_tensors([w0], bt) == [32]
    # a second context: w0 already has data (skipped), the view of w0 (through
    # another view, as ggml records its src) follows it, w1 is placed anew
    part = gg.Tensor("part", 8, op="VIEW", src=[w0], view_src=w0, view_offs=8)
    sub = gg.Tensor("sub", 4, op="VIEW", src=[part], view_src=w0, view_offs=12)
    assert gg.alloc_ctx_tensors([w0, sub, w1], bt) == [16]
    assert (w0.address, sub.address, w1.address) == ((0, 0, 0), (0, 0, 12), (0, 0, 0))
    assert part.address is None and not sub.flags & gg.HAS_DATA and w1.flags & gg.HAS_DATA
    assert gg.alloc_ctx_tensors([], bt) == [] and gg.alloc_ctx_tensors_size([], bt) == 0


def test_alloc_ctx_tensors_refusals():
    w = gg.Tensor("w", 8)
    with pytest.raises(PlanError) as info:
        gg.alloc_ctx_tensors([w], gg.BufferType(24))
    assert info.value.code == "ALIGNMENT_VIOLATION" and "24" in str(info.value)
    # ggml's view_src is always the root: a view of a view is refused, naming it
    inner = gg.Tensor("inner", 4, op="VIEW", view_src=w)
    outer = gg.Tensor("outer", 4, op="VIEW", view_src=inner)
    with pytest.raises(PlanError) as info:
        gg.alloc_ctx_tensors([w, outer], gg.BufferType(8))
    assert (info.value.code, info.value.tensor) == ("INVALID_IR_SHAPES", "outer")
    assert w.address is None   # nothing bound on a refusal


def test_multiple_buffer_types():
    """llama.cpp test-alloc 'multiple_buffer_types': ctx weights in two buffer
    types, then a graph split across them."""
    a_bt, b_bt = gg.BufferType(8, 32, "A"), gg.BufferType(8, gg.SIZE_MAX, "B")
    a0, a1 = gg.Tensor("a0", 16), gg.Tensor("a1", 16)
    b0, b1 = gg.Tensor("b0", 24), gg.Tensor("b1", 4)
    assert gg.alloc_ctx_tensors([a0, a1], a_bt) == [32]
    assert gg.alloc_ctx_tensors([b0, b1], b_bt) == [32]
    x0 = inp("x0", 16)
    x1 = op("x1", "MUL", 16, x0, a0)
    x2 = op("x2", "PAD", 24, x1)
    x3 = op("x3", "MUL", 24, x2, b0)
    x4 = op("x4", "MEAN", 4, x3)
    x5 = op("x5", "ADD", 4, x4, b1)
    x6 = op("x6", "PAD", 16, x5)
    x7 = op("x7", "ADD", 16, x6, a1)
    x8 = op("x8", "SCALE", 16, x7)
    x8.flags |= gg.OUTPUT
    graph = gg.build_forward([x8])
    buffer_of = {"x1": 0, "x2": 0, "x7": 0, "x8": 0, "x3": 1, "x4": 1, "x5": 1, "x6": 1}
    leaf_ids = [1 if t.name.startswith("b") else 0 for t in graph.leafs]
    ga = gg.GraphAllocator([a_bt, b_bt])
    assert ga.reserve_n(graph, [buffer_of[t.name] for t in graph.nodes], leaf_ids)
    assert (ga.get_buffer_size(0), ga.get_buffer_size(1)) == (16 + 24, 24)
    assert ga.addresses["x7"][0] == 1 and ga.addresses["x8"][0] == 1  # in place of x6
    assert ga.alloc_graph(graph) and x8.address == ga.addresses["x8"]


def test_reallocation_with_one_buffer_is_automatic():
    bt = gg.BufferType(4, 32)
    x0, x1 = inp("x0", 24), inp("x1", 16)
    x2 = view("x2", x0, 16)
    x3 = op("x3", "ADD", 16, x2, x1)
    x3.flags |= gg.OUTPUT
    g1 = gg.build_forward([x3])
    ga = gg.GraphAllocator(bt)
    assert ga.alloc_graph(g1) and ga.get_buffer_size(0) == 40
    assert not ga.needs_realloc(g1)
    y0, y1 = inp("y0", 20), inp("y1", 20)
    y2 = op("y2", "ADD", 20, y0, y1)
    y2.flags |= gg.OUTPUT
    g2 = gg.build_forward([y2])
    assert ga.needs_realloc(g2)          # y0 is larger than what x0's place was planned for
    assert ga.alloc_graph(g2) and ga.get_buffer_size(0) == 40
    assert y2.address is not None and ga.inplace_of.get("y2") in ("y0", "y1")
    two = gg.GraphAllocator([bt, gg.BufferType(4, 32)])
    two.reserve_n(g1, [0] * len(g1.nodes), [0] * len(g1.leafs))
    assert two.alloc_graph(g2) is False  # several buffers: the caller must reserve again


def test_strategy_hook_shrinks_ggml_buffers():
    """The same GraphAllocator calls, placed by plan()'s strategies: never larger
    than ggml, smaller where ggml leaves gaps, and still overlap-free."""
    saving = {}
    for name in ("mobilenet_v2-inference", "resnet18-inference", "gpt2-small-inference"):
        graph, ts = gg.from_emel_graph(graph_path(name))
        exact = gg.GraphAllocator(gg.BufferType(32))
        exact.reserve(graph)
        auto = gg.GraphAllocator(gg.BufferType(32), strategy="auto")
        auto.reserve(graph)
        assert auto.get_buffer_size(0) <= exact.get_buffer_size(0)
        saving[name] = exact.get_buffer_size(0) - auto.get_buffer_size(0)
        assert auto.alloc_graph(graph)
        assert auto.inplace_of == exact.inplace_of   # the same in-place decisions
    assert saving["mobilenet_v2-inference"] == 11239424 - 9633792
    assert saving["resnet18-inference"] == 7024640 - 6422528


def test_view_src_must_be_the_root():
    """ggml flattens views: a view whose view_src is itself a view is refused,
    naming the tensor (never a crash)."""
    x0 = inp("x0", 16)
    v = view("v", x0, 8)
    vv = gg.Tensor("vv", 4, op="VIEW", src=[v], view_src=v)   # not flattened
    y = op("y", "ADD", 4, vv)
    y.flags |= gg.OUTPUT
    ga = gg.GraphAllocator(gg.BufferType(8))
    with pytest.raises(PlanError) as info:
        ga.reserve(gg.build_forward([y]))
    assert info.value.code == "INVALID_IR_SHAPES" and info.value.tensor == "vv"
    assert ga.get_buffer_size(0) == 0 and not ga.addresses   # nothing was reserved


def test_size_that_wraps_when_aligned_is_an_overflow():
    x0 = inp("x0", 2**64 - 1)
    y = op("y", "MEAN", 4, x0)
    y.flags |= gg.OUTPUT
    with pytest.raises(PlanError) as info:
        alloc(y, gg.SIZE_MAX, alignment=32)
    assert info.value.code == "ALLOCATION_OVERFLOW" and str(2**64 - 1) in str(info.value)


def test_buffer_ids_must_match_the_graph():
    x0 = inp("x0", 8)
    y = op("y", "SCALE", 8, x0)
    graph = gg.build_forward([y])
    ga = gg.GraphAllocator([gg.BufferType(8), gg.BufferType(8)])
    with pytest.raises(PlanError) as info:
        ga.reserve_n(graph, [0, 0, 0], [0])      # one node, three ids
    assert info.value.code == "INVALID_IR_SHAPES" and "node_buffer_ids" in str(info.value)
    with pytest.raises(PlanError) as info:
        ga.reserve_n(graph, [2], [0])            # buffer id 2 of 2
    assert info.value.code == "INVALID_IR_SHAPES" and "buffer id 2" in str(info.value)


# Found by a differential run against llama.cpp's own ggml-alloc (about 67,000 random graphs;
# expected values are what ggml gave on these graphs, docs/ggml.md "Checked against ggml").

def test_clamp_runs_in_place_as_in_ggml():
    t3 = gg.Tensor("t3", 152, op="ADD", layout=("i8", 152, 1))
    t5 = gg.Tensor("t5", 80, op="ADD", src=[t3], layout=("f32", 20, 1))
    t7 = gg.Tensor("t7", 80, op="CLAMP", src=[t5], layout=("f32", 20, 1))
    ga = gg.GraphAllocator(gg.BufferType(1))
    assert ga.alloc_graph(gg.Graph(nodes=[t3, t5, t7], leafs=[]))
    assert (t5.address, t7.address, ga.get_buffer_size(0)) == ((0, 0, 152), (0, 0, 152), 232)


def test_alloc_graph_binds_a_tensor_at_the_first_record_it_meets():
    # Reserved with n0 and n1 both reading `in`; allocated with n1 reading n0 instead
    # (nothing grew, so no realloc): ggml binds n0 at its own record (8), not at the place
    # the reserved graph's second source record held (`in`'s, 0).
    def graph(chain):
        i = gg.Tensor("in", 8, flags=gg.INPUT)
        a = gg.Tensor("n0", 8, op="MUL_MAT", src=[i], flags=0 if chain else gg.OUTPUT)
        b = gg.Tensor("n1", 8, op="MUL_MAT", src=[a if chain else i], flags=gg.OUTPUT)
        return gg.Graph(nodes=[a, b], leafs=[i])
    ga = gg.GraphAllocator(gg.BufferType(8))
    assert ga.reserve(graph(False))
    g = graph(True)
    assert not ga.needs_realloc(g) and ga.alloc_graph(g)
    assert [t.address for t in g.leafs + g.nodes] == [(0, 0, 0), (0, 0, 8), (0, 0, 16)]


def test_a_leaf_without_its_reserved_place_is_a_plan_error():
    # ggml's needs_realloc does not look at leafs; it then aborts (a leaf that grew) or reads
    # buffer id -1 (a leaf that had data at the reserve). emel says which leaf and why.
    ga = gg.GraphAllocator(gg.BufferType(1))
    assert ga.reserve(gg.Graph(nodes=[], leafs=[gg.Tensor("w", 394)]))
    grown = gg.Graph(nodes=[], leafs=[gg.Tensor("w", 788)])
    assert not ga.needs_realloc(grown)
    with pytest.raises(PlanError, match=r"leaf 0 \('w'\) needs 788 bytes, 394 were reserved") as e:
        ga.alloc_graph(grown)
    assert e.value.code == "ARENA_TOO_SMALL"
    ga = gg.GraphAllocator(gg.BufferType(1))
    assert ga.reserve(gg.Graph(nodes=[], leafs=[gg.Tensor("w", 1, flags=gg.HAS_DATA)]))
    with pytest.raises(PlanError, match=r"'w'\) had data when the graph was reserved and has none now"):
        ga.alloc_graph(gg.Graph(nodes=[], leafs=[gg.Tensor("w", 1)]))


def test_chunk_sizes_add_up_to_the_buffer_and_shared_ids_report_none():
    # max_size 16: the test-alloc graph of docs/ggml.md takes two chunks, 16 + 8.
    x0, x1, x2 = (gg.Tensor(n, 8, flags=gg.INPUT) for n in ("x0", "x1", "x2"))
    x3 = gg.Tensor("x3", 8, op="MUL", src=[x0, x1])
    x4 = gg.Tensor("x4", 8, op="ADD", src=[x1, x2])
    x5 = gg.Tensor("x5", 8, op="ADD", src=[x3, x0])
    x6 = gg.Tensor("x6", 8, op="ADD", src=[x4, x5], flags=gg.OUTPUT)
    bt = gg.BufferType(alignment=8, max_size=16)
    ga = gg.GraphAllocator([bt, bt])
    assert ga.get_chunk_sizes(0) == [] and ga.get_chunk_sizes(1) == []   # nothing reserved yet
    graph = gg.build_forward([x6])
    assert ga.reserve_n(graph, [0] * len(graph.nodes), [0] * len(graph.leafs))
    assert ga.get_chunk_sizes(0) == [16, 8] and sum(ga.get_chunk_sizes(0)) == ga.get_buffer_size(0) == 24
    assert ga.get_chunk_sizes(1) == [] and ga.get_buffer_size(1) == 0    # shares id 0's buffer
    with pytest.raises(PlanError):
        ga.get_chunk_sizes(2)


# Found by the fuzzer (surface ggml, seeds 3000051332 and 3000064274: "ends past its chunk").
# ggml places a tensor twice when it is freed and read again: a node list that reads a node
# before the node's own entry, or an INPUT-flagged node that takes its parent in place while
# the parent still has readers. The planner strategies took such a tensor's lifetime from its
# last placement to a free before it, an empty span, and placed it anywhere (past the buffer's
# end, or over tensors live with it).

def _no_overlap(ga, graph, names):
    size = ga.get_chunk_sizes(0)[0]
    nbytes = {t.name: t.nbytes for t in graph.leafs + graph.nodes}
    spans = sorted((ga.addresses[n][2], ga.addresses[n][2] + nbytes[n]) for n in names)
    assert spans[-1][1] <= size and all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_strategies_place_a_node_read_before_its_entry():
    def graph():
        a = gg.Tensor("a", 32, flags=gg.INPUT)
        c = gg.Tensor("c", 256, op="MUL_MAT", src=[a])
        b = gg.Tensor("b", 32, op="MUL_MAT", src=[c], flags=gg.OUTPUT)
        return gg.Graph(nodes=[b, c], leafs=[a])   # b reads c before c's own entry
    exact = gg.GraphAllocator(gg.BufferType(32))
    assert exact.alloc_graph(graph())                # ggml: c at 32 both times
    assert exact.get_chunk_sizes(0) == [320]
    assert exact.addresses == {"a": (0, 0, 0), "c": (0, 0, 32), "b": (0, 0, 288)}
    for strategy in ("greedy_by_size", "tmmu", "best_fit"):
        ga = gg.GraphAllocator(gg.BufferType(32), strategy=strategy)
        g = graph()
        assert ga.alloc_graph(g)
        assert ga.get_chunk_sizes(0) == [320]        # a, b and c are all live at b's step
        _no_overlap(ga, g, "abc")
        if strategy == "greedy_by_size":             # was c at 0 in a 64-byte buffer
            assert [t.address for t in g.leafs + g.nodes] == [(0, 0, 256), (0, 0, 288), (0, 0, 0)]


def test_strategies_place_a_parent_an_input_node_took_in_place_early():
    def graph():
        x = gg.Tensor("x", 256)
        y = gg.Tensor("y", 256, op="ADD", src=[x])
        z = gg.Tensor("z", 256, op="SCALE", src=[x], flags=gg.INPUT)   # takes x before y reads it
        o = gg.Tensor("o", 32, op="MUL_MAT", src=[y, z], flags=gg.OUTPUT)
        return gg.build_forward([o])
    exact = gg.GraphAllocator(gg.BufferType(32))
    assert exact.reserve(graph())                    # ggml places x at 0, then again at 256
    assert exact.addresses == {"x": (0, 0, 256), "y": (0, 0, 512), "z": (0, 0, 0), "o": (0, 0, 256)}
    assert exact.inplace_of == {"z": "x"} and exact.get_chunk_sizes(0) == [768]
    for strategy in ("greedy_by_size", "tmmu", "best_fit"):
        ga = gg.GraphAllocator(gg.BufferType(32), strategy=strategy)
        g = graph()
        assert ga.reserve(g) and ga.get_chunk_sizes(0) == [768]
        _no_overlap(ga, g, "xyz")                    # live together at y's step
        _no_overlap(ga, g, "yzo")                    # and at o's
        if strategy == "tmmu":
            assert ga.addresses == {"x": (0, 0, 0), "y": (0, 0, 512), "z": (0, 0, 256), "o": (0, 0, 0)}


def _chain():
    a = gg.Tensor("a", 32, flags=gg.INPUT)
    b = gg.Tensor("b", 32, op="MUL_MAT", src=[a])
    c = gg.Tensor("c", 32, op="MUL_MAT", src=[b], flags=gg.OUTPUT)
    return a, b, c


def test_a_bound_tensor_that_grew_is_a_plan_error_and_nothing_moves():
    # ggml: c has data, so needs_realloc and init_tensor skip it and it overlaps b.
    a, b, c = _chain()
    g = gg.build_forward([c])
    ga = gg.GraphAllocator(gg.BufferType(32))
    assert ga.alloc_graph(g) and ga.alloc_graph(g)  # again, unchanged: nothing moves
    assert [t.address for t in (a, b, c)] == [(0, 0, 0), (0, 0, 32), (0, 0, 0)]
    c.nbytes = 64
    assert not ga.needs_realloc(g)  # as ggml: a tensor with data is not looked at
    with pytest.raises(PlanError, match=r"tensor 'c' \(bound by an earlier alloc_graph\) needs 64 bytes, "
                                        r"32 were reserved for it") as e:
        ga.alloc_graph(g)
    assert (e.value.code, e.value.tensor) == ("ARENA_TOO_SMALL", "c")
    assert ga.addresses == {"a": (0, 0, 0), "b": (0, 0, 32), "c": (0, 0, 0)}
    assert [t.address for t in (a, b, c)] == [(0, 0, 0), (0, 0, 32), (0, 0, 0)]
    assert ga.get_buffer_size(0) == 64
    c.address = None  # a and b still sit where the plan alloc_graph must replace put them
    with pytest.raises(PlanError, match=r"'a' .* has to plan again") as e:
        ga.alloc_graph(g)
    assert (e.value.code, e.value.tensor, c.address, ga.get_buffer_size(0)) == ("ARENA_TOO_SMALL", "a", None, 64)
    a.address = b.address = None
    assert ga.alloc_graph(g) and ga.get_buffer_size(0) == 128
    assert ga.addresses == {t.name: t.address for t in (a, b, c)} == \
        {"a": (0, 0, 0), "b": (0, 0, 32), "c": (0, 0, 64)}


def test_a_tensor_bound_under_a_replaced_plan_is_a_plan_error():
    # ggml: reserve re-creates the buffer; the tensors keep pointers into the freed one.
    a, b, c = _chain()
    g = gg.build_forward([c])
    ga = gg.GraphAllocator(gg.BufferType(32))
    assert ga.alloc_graph(g)
    x = gg.Tensor("x", 256, flags=gg.INPUT)
    assert ga.reserve(gg.build_forward([gg.Tensor("y", 256, op="MUL_MAT", src=[x], flags=gg.OUTPUT)]))
    assert ga.get_buffer_size(0) == 512
    with pytest.raises(PlanError, match=r"tensor 'a' \(bound by an earlier alloc_graph\) is where a plan "
                                        r"since replaced put it") as e:
        ga.alloc_graph(g)
    assert (e.value.code, e.value.tensor, ga.get_buffer_size(0)) == ("ARENA_TOO_SMALL", "a", 512)
    assert ga.addresses == {"x": (0, 0, 0), "y": (0, 0, 256)}
    # Another allocator's binding is pre-allocated data to this one, as in ggml.
    other = gg.GraphAllocator(gg.BufferType(32))
    d = gg.Tensor("d", 32, op="ADD", src=[c], flags=gg.OUTPUT)
    assert other.alloc_graph(gg.build_forward([d]))
    assert other.addresses == {"d": (0, 0, 0)} and d.address == (0, 0, 0) and other.get_buffer_size(0) == 32


def test_a_tensor_bound_elsewhere_is_pre_allocated_as_in_ggml():
    # ggml_gallocr_is_allocated: data != NULL. A TensorAllocator's tensor is neither
    # planned nor rebound, and y can no longer go where x was.
    x = gg.Tensor("x", 32, flags=gg.INPUT)
    gg.TensorAllocator(64).alloc(x)
    y = gg.Tensor("y", 32, op="MUL_MAT", src=[x])
    z = gg.Tensor("z", 32, op="ADD", src=[y], flags=gg.OUTPUT)
    g = gg.build_forward([z])
    ga = gg.GraphAllocator(gg.BufferType(32))
    assert ga.reserve(g) and ga.get_buffer_size(0) == 32
    assert ga.addresses == {"y": (0, 0, 0), "z": (0, 0, 0)} and ga.inplace_of == {"z": "y"}
    x.nbytes = 64  # grown, but not this allocator's to check (ggml does not either)
    assert not ga.needs_realloc(g) and ga.alloc_graph(g)
    assert [t.address for t in (x, y, z)] == [(0, 0, 0), (0, 0, 0), (0, 0, 0)]
