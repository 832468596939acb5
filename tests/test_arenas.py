"""The arena engine (docs/arenas.md): arrays over real arena memory, their
lifetime and DLPack export, zeroing, the debug pattern, commits and their state
hash, the ledger and the budget, and the execution check on hand-made graphs
(the model graphs and random graphs are in test_execution_check.py)."""

import gc
import hashlib
import math

import numpy as np
import pytest

import emel.memory as mm
from emel.memory import examples
from emel.memory.arenas import NUMPY_DTYPES

STRIDE = 0x9E3779B97F4A7C15
M64 = 2**64 - 1


def small_graph():
    g = mm.Graph(name="small")
    g.tensor("x", [4, 8], "float32", role="input")
    g.tensor("w", [8, 8], "float32", role="parameter")
    g.tensor("h", [4, 8], "float32")
    g.tensor("r", [4, 8], "float32", can_inplace=True)
    g.tensor("hv", [2, 8], "float32", view_of="r", byte_offset=64)
    g.tensor("q", [3, 5], "bfloat16")
    g.tensor("k", [32, 32], "q4_0", nbytes=576)
    g.tensor("y", [2, 8], "float32", role="output")
    g.node("mm", "matmul", ["x", "w"], ["h"])
    g.node("relu", "relu", ["h"], ["r"])
    g.node("cast", "cast", ["r"], ["q", "k"])
    g.node("slice", "view", ["r"], ["hv"])
    g.node("out", "add", ["q", "k", "hv"], ["y"])
    return g


def pattern_bytes(seed, root_id, start, length):
    """The documented debug pattern, written from docs/arenas.md with hashlib."""
    digest = hashlib.sha256(seed.to_bytes(8, "big") + root_id.encode()).digest()
    key = int.from_bytes(digest[:8], "big")
    out = bytearray()
    for pos in range(start, start + length):
        word = key ^ (((pos >> 3) + 1) * STRIDE & M64)
        out.append((word >> (8 * (pos & 7))) & 0xFF)
    return bytes(out)


@pytest.fixture(scope="module")
def llama_plan():
    return mm.plan(examples.load("llama-tiny-inference"))


# -- arrays ---------------------------------------------------------------------
def test_array_has_shape_dtype_and_views_arena_memory():
    plan = mm.plan(small_graph())
    arenas = mm.Arenas(plan)
    x = arenas.array("x")
    assert x.shape == (4, 8) and x.dtype == np.float32 and not x.flags.owndata
    buf = arenas.buffer(plan.tensors["x"].arena)
    off = plan.tensors["x"].offset
    assert np.shares_memory(x, buf)
    x[:] = np.arange(32, dtype=np.float32).reshape(4, 8)
    assert bytes(buf[off:off + 128]) == np.arange(32, dtype=np.float32).tobytes()
    assert arenas.address("x") == x.__array_interface__["data"][0]
    assert arenas.address("x") == arenas.info()[[r["name"] for r in arenas.info()].index(
        plan.tensors["x"].arena)]["address"] + off


def test_view_array_sits_at_its_base_offset():
    plan = mm.plan(small_graph())
    arenas = mm.Arenas(plan)
    r, hv = arenas.array("r"), arenas.array("hv")
    assert hv.shape == (2, 8)
    r[:] = np.arange(32, dtype=np.float32).reshape(4, 8)
    # byte_offset 64 = 16 float32 elements into r
    assert np.array_equal(hv.ravel(), np.arange(16, 32, dtype=np.float32))
    hv[0, 0] = -1.0
    assert r.ravel()[16] == -1.0


def test_dtypes_numpy_lacks_are_uint8_bytes():
    plan = mm.plan(small_graph())
    arenas = mm.Arenas(plan)
    q, k = arenas.array("q"), arenas.array("k")
    assert q.dtype == np.uint8 and q.shape == (30,)     # bfloat16: 15 elements x 2 bytes
    assert k.dtype == np.uint8 and k.shape == (576,)    # q4_0: its nbytes
    for name, np_type in NUMPY_DTYPES.items():
        g = mm.Graph()
        g.tensor("t", [3, 2], name, role="input")
        g.node("n", "use", ["t"], [])
        a = mm.Arenas(mm.plan(g)).array("t")
        assert a.dtype == np.dtype(np_type) and a.shape == (3, 2)


def test_array_keeps_memory_alive_after_arenas_are_gone(llama_plan):
    arenas = mm.Arenas(llama_plan)
    tid = llama_plan.tensor_ids[3]
    a = arenas.array(tid)
    a[...] = 7
    base = a.base
    del arenas
    gc.collect()
    # The memory object is still referenced by the array: no dangling pointer.
    assert a.base is base and np.all(a == 7)
    a[...] = 3
    assert np.all(a == 3)


def test_reapply_leaves_old_arrays_valid(llama_plan):
    arenas = mm.Arenas(llama_plan)
    tid = llama_plan.tensor_ids[3]
    old = arenas.array(tid)
    old[...] = 5
    arenas.apply(mm.plan(examples.load("llama-tiny-inference"), strategy="best_fit"))
    gc.collect()
    assert np.all(old == 5)
    assert not np.shares_memory(old, arenas.array(tid))
    assert np.all(arenas.array(tid) == 0)  # the new buffers were zeroed


def test_dlpack_to_torch_without_copy():
    torch = pytest.importorskip("torch")
    plan = mm.plan(small_graph())
    arenas = mm.Arenas(plan)
    x = arenas.array("x")
    t = torch.from_dlpack(x)
    assert t.shape == (4, 8) and t.dtype == torch.float32
    assert t.data_ptr() == arenas.address("x")
    t.fill_(2.5)
    assert np.all(x == 2.5)
    q = torch.from_dlpack(arenas.array("q"))
    assert q.dtype == torch.uint8 and q.data_ptr() == arenas.address("q")
    del arenas, x
    gc.collect()
    assert float(t.sum()) == 2.5 * 32  # torch holds the capsule, the capsule the memory


def test_base_alignment_and_capacity():
    plan = mm.plan(small_graph(), alignment=256)
    arenas = mm.Arenas(plan)
    for row in arenas.info():
        assert row["alignment"] == 256 and row["address"] % 256 == 0
        assert row["size"] == plan.arenas[row["name"]].size
    plan = mm.plan(small_graph(), alignment=1)
    for row in mm.Arenas(plan).info():
        assert row["alignment"] == 64 and row["address"] % 64 == 0
    # A tensor asking for more than its arena: the base carries it.
    g = small_graph()
    g.tensors[2]["alignment"] = 4096  # h
    plan = mm.plan(g, alignment=8)
    arenas = mm.Arenas(plan)
    assert arenas.address("h") % 4096 == 0 and arenas.array("h").flags.aligned
    assert {r["name"]: r["alignment"] for r in arenas.info()} == {"activations": 4096,
                                                                   "parameters": 64}
    plan = mm.plan(small_graph(), arenas={"activations": {"capacity_bytes": 4096}})
    arenas = mm.Arenas(plan)
    assert arenas.info()[0]["allocated"] <= 4096


def test_unknown_tensor_and_bad_arguments():
    plan = mm.plan(small_graph())
    arenas = mm.Arenas(plan)
    with pytest.raises(KeyError, match="nope"):
        arenas.array("nope")
    with pytest.raises(KeyError, match="activations"):
        arenas.buffer("nope")
    with pytest.raises(ValueError, match="execution_mode"):
        mm.Arenas(plan, execution_mode="secret")
    with pytest.raises(TypeError):
        mm.Arenas(small_graph())


# -- ZeroTensor_v1 / DebugFillTensor_v1 -------------------------------------------
def test_apply_zeroes_and_zero_tensor():
    plan = mm.plan(small_graph())
    arenas = mm.Arenas(plan)
    assert all(not arenas.array(t).view(np.uint8).any() for t in plan.tensor_ids)
    arenas.debug_fill("h")
    assert arenas.array("h").view(np.uint8).any()
    arenas.zero("h")
    assert not arenas.array("h").view(np.uint8).any()
    for t in ("x", "r", "k"):
        arenas.debug_fill(t)
    arenas.zero()
    assert all(not arenas.array(t).view(np.uint8).any() for t in plan.tensor_ids)


def test_debug_fill_matches_the_documented_pattern():
    plan = mm.plan(small_graph())
    arenas = mm.Arenas(plan, pattern_seed=12345)
    for tid in ("x", "k", "q"):
        arenas.debug_fill(tid)
        assert arenas.array(tid).tobytes() == pattern_bytes(12345, tid, 0, plan.tensors[tid].size)
    arenas.debug_fill("hv")  # a view: its root's pattern at its range
    assert arenas.array("hv").tobytes() == pattern_bytes(12345, "r", 64, 64)
    other = mm.Arenas(plan, pattern_seed=12346)
    other.debug_fill("x")
    assert other.array("x").tobytes() != arenas.array("x").tobytes()


@pytest.mark.parametrize("mode", ["confidential", "regulated"])
def test_debug_fill_and_execution_check_refused_outside_standard(mode):
    plan = mm.plan(small_graph())
    arenas = mm.Arenas(plan, execution_mode=mode)
    with pytest.raises(mm.PlanError) as e:
        arenas.debug_fill("x")
    assert e.value.code == "DEBUG_FILL_FORBIDDEN" and mode in str(e.value)
    with pytest.raises(mm.PlanError) as e:
        mm.verify_execution(plan, arenas)
    assert e.value.code == "DEBUG_FILL_FORBIDDEN"
    with pytest.raises(mm.PlanError) as e:
        mm.Arenas(plan, execution_mode=mode, zero=False)
    assert e.value.code == "ZEROING_REQUIRED"
    assert all(not arenas.array(t).view(np.uint8).any() for t in plan.tensor_ids)


# -- CommitExecution_v1 ------------------------------------------------------------
def state_hash(plan, step, committed_step, mode=0, data=None):
    """The documented state layout, rebuilt with struct-free big-endian bytes."""
    def u(n, width):
        return n.to_bytes(width, "big")
    out = bytearray(b"emel.arena-state/1") + u(step, 8) + u(mode, 1)
    rows = plan._arena_rows
    out += u(len(rows), 4)
    for row, size in zip(rows, plan._arena_sizes):
        name = row["name"].encode()
        out += u(len(name), 4) + name + u(size, 8) + u(max(64, row["alignment"]), 8)
        out += u(committed_step[row["name"]], 8)
    names = [row["name"] for row in rows]
    out += u(len(plan.tensor_ids), 4)
    for tid in plan.tensor_ids:
        t = plan.tensors[tid]
        out += u(len(tid.encode()), 4) + tid.encode() + u(names.index(t.arena), 4)
        out += u(t.offset, 8) + u(t.size, 8)
    out += u(0 if data is None else 1, 1)
    h = hashlib.sha256(out)
    for d in data or ():
        h.update(hashlib.sha256(d).digest())
    return h.hexdigest()


def test_commit_is_idempotent_and_hash_follows_the_documented_layout():
    plan = mm.plan(small_graph())
    arenas = mm.Arenas(plan)
    c1 = arenas.commit()
    assert c1.step == 1 and set(c1.visibility.values()) == {"pending"}
    assert c1 == arenas.commit()                  # nothing in between: same commit
    assert c1.state_hash == state_hash(plan, 1, c1.committed_step)
    # Same plan, other buffers: the hash does not depend on addresses.
    assert mm.Arenas(plan).commit().state_hash == c1.state_hash
    arenas.zero("w")                              # writes the parameters arena only
    c2 = arenas.commit()
    assert c2.step == 2 and c2.state_hash != c1.state_hash
    assert c2.visibility == {"activations": "committed", "parameters": "pending"}
    assert c2.committed_step == {"activations": 1, "parameters": 2}
    assert c2.state_hash == state_hash(plan, 2, c2.committed_step)
    assert arenas.commit() == c2


def test_commit_with_data_hashes_the_bytes():
    plan = mm.plan(small_graph())
    arenas = mm.Arenas(plan)
    c = arenas.commit(include_data=True)
    data = [arenas.buffer(name).tobytes() for name in c.committed_step]
    assert c.includes_data and c.state_hash == state_hash(plan, 1, c.committed_step, data=data)
    arenas.debug_fill("x")
    c2 = arenas.commit(include_data=True)
    assert c2.step == 2 and c2.state_hash != c.state_hash
    regulated = mm.Arenas(plan, execution_mode="regulated")
    assert regulated.commit().includes_data  # regulated: always an audit of the bytes


# -- ledger and budget ---------------------------------------------------------------
def test_ledger_counts_bytes(llama_plan):
    arenas = mm.Arenas(llama_plan)
    led = arenas.ledger
    assert led.bytes_allocated == llama_plan.total_bytes == arenas.nbytes
    assert led.peak_bytes == led.bytes_allocated and led.allocation_failures == 0
    lb = llama_plan.metrics["total_lower_bound"]
    assert led.internal_fragmentation_ratio == pytest.approx(1 - lb / llama_plan.total_bytes)
    arenas.commit()
    assert [h.step for h in arenas.ledger_history] == [0, 1]
    smaller = mm.plan(examples.load("llama-tiny-inference"), strategy="greedy_by_size")
    arenas.apply(smaller)
    # Both sets of buffers were held for a moment: the peak says so.
    assert arenas.ledger.bytes_allocated == smaller.total_bytes
    assert arenas.ledger.peak_bytes == llama_plan.total_bytes + smaller.total_bytes


def test_budget_refusal_takes_nothing(llama_plan):
    total = llama_plan.total_bytes
    with pytest.raises(mm.PlanError) as e:
        mm.Arenas(llama_plan, memory_bytes_budget=total - 1)
    assert e.value.code == "QUOTA_EXCEEDED" and e.value.arena == "parameters"
    with pytest.raises(mm.PlanError) as e:
        mm.Arenas(llama_plan, memory_bytes_budget=10)
    assert e.value.code == "QUOTA_EXCEEDED" and e.value.arena == "activations"
    arenas = mm.Arenas(llama_plan, memory_bytes_budget=total)  # exactly fits
    a = arenas.array(llama_plan.tensor_ids[0])
    a[...] = 1
    arenas.commit()
    before = (arenas.ledger, arenas.ledger_history, arenas.info(), arenas.step, arenas.plan)
    bigger = mm.plan(examples.load("llama-tiny-inference"), alignment=4096)
    assert bigger.total_bytes > total
    with pytest.raises(mm.PlanError) as e:
        arenas.apply(bigger)
    assert e.value.code == "QUOTA_EXCEEDED"
    assert (arenas.ledger, arenas.ledger_history, arenas.info(), arenas.step, arenas.plan) == before
    assert np.all(a == 1) and np.shares_memory(a, arenas.array(llama_plan.tensor_ids[0]))
    assert arenas.commit().step == before[3] + 1  # array() handed out: arena marked written


def test_host_allocation_failure_is_rolled_back():
    g = mm.Graph()
    g.tensor("small", [4], "float32", role="input")
    g.tensor("huge", [1], "q8", nbytes=2**52, role="parameter")
    g.node("n", "use", ["small", "huge"], [])
    plan = mm.plan(g)
    with pytest.raises(mm.PlanError) as e:
        mm.Arenas(plan)
    assert e.value.code == "ALLOCATION_FAILED" and e.value.arena == "parameters"
    ok = mm.Arenas(mm.plan(small_graph()))
    before = (ok.info(), ok.ledger.bytes_allocated, ok.ledger.peak_bytes, ok.step)
    with pytest.raises(mm.PlanError) as e:
        ok.apply(plan)
    assert ok.ledger.allocation_failures == 1
    assert (ok.info(), ok.ledger.bytes_allocated, ok.ledger.peak_bytes, ok.step) == before


def test_apply_refuses_out_of_bounds_and_misaligned_offsets():
    plan = mm.plan(small_graph())
    i = plan.tensor_ids.index("h")
    plan.offsets[i] = plan.arenas["activations"].size  # past the end
    with pytest.raises(mm.PlanError) as e:
        mm.Arenas(plan)
    assert e.value.code == "ADDRESS_COLLISION" and e.value.tensor == "h"
    plan.offsets[i] = 4
    with pytest.raises(mm.PlanError) as e:
        mm.Arenas(plan)
    assert e.value.code == "ALIGNMENT_VIOLATION" and e.value.tensor == "h"


# -- execution check on hand-made graphs ---------------------------------------------
def test_verify_execution_counts_the_walk():
    plan = mm.plan(small_graph())
    arenas = mm.Arenas(plan)
    report = mm.verify_execution(plan, arenas)
    assert report.steps == 5
    # written: x, w (unproduced), h, r, q, k, y; a view writes nothing
    assert report.tensors_written == 7
    assert report.bytes_written == 128 + 256 + 128 + 128 + 30 + 576 + 64
    # checked: 8 node inputs, then what lives to the last step: w, r (its view
    # hv is read there), q, k (read there) and y
    assert report.tensors_checked == 8 + 5
    assert report.bytes_checked == ((128 + 256) + 128 + 128 + 128 + (30 + 576 + 64)
                                    + (256 + 128 + 30 + 576 + 64))
    assert arenas.array("y").tobytes() == pattern_bytes(0, "y", 0, 64)  # live to the end


def test_inplace_output_may_overwrite_its_input():
    plan = mm.plan(small_graph())
    assert plan.tensors["r"].inplace_of == "h"
    assert plan.tensors["r"].offset == plan.tensors["h"].offset
    mm.verify_execution(plan, mm.Arenas(plan))


def test_corrupted_offset_is_caught_with_tensor_and_step(llama_plan):
    """Move one activation onto another that is still live: the first read of
    the victim after the intruder's birth names both, and the step."""
    plan = mm.plan(examples.load("llama-tiny-inference"))
    graph = {t["id"]: t for t in plan.graph.tensors}
    reads = {}
    for step, node in enumerate(plan.graph.nodes):
        for tid in node["inputs"]:
            reads.setdefault(tid, []).append(step)
    views = {t["view_of"]["base"] for t in plan.graph.tensors if "view_of" in t}
    acts = [tid for tid, t in plan.tensors.items()
            if t.view_of is None and t.arena == "activations" and tid not in views
            and graph[tid]["role"] == "activation" and t.size > 0]
    pair = next((a, b) for a in acts for b in acts
                if plan.tensors[a].birth < plan.tensors[b].birth
                and any(s > plan.tensors[b].birth for s in reads.get(a, ()))
                and plan.tensors[b].size <= plan.tensors[a].size
                and plan.tensors[a].offset != plan.tensors[b].offset)
    victim, intruder = pair
    plan.offsets[plan.tensor_ids.index(intruder)] = plan.tensors[victim].offset
    plan._tensors = None
    arenas = mm.Arenas(plan, zero=False)
    with pytest.raises(mm.PlanError) as e:
        mm.verify_execution(plan, arenas)
    err = e.value
    first_read = min(s for s in reads[victim] if s > plan.tensors[intruder].birth)
    assert err.code == "ADDRESS_COLLISION"
    assert (err.tensor, err.overwritten_by, err.step) == (victim, intruder, first_read)
    assert err.node == plan.graph.nodes[first_read]["id"] and err.byte_offset == 0
    assert f"step {first_read}" in str(err) and intruder in str(err)


def test_verify_execution_needs_the_same_plan(llama_plan):
    arenas = mm.Arenas(llama_plan, zero=False)
    with pytest.raises(ValueError, match="another plan"):
        mm.verify_execution(mm.plan(examples.load("llama-tiny-inference")), arenas)


def test_repr_and_html_show_each_arena(llama_plan):
    arenas = mm.Arenas(llama_plan)
    text = repr(arenas)
    assert text.startswith("<Arenas llama-tiny-inference") and "standard step=0" in text
    for name, a in llama_plan.arenas.items():
        assert f"{name}=" in text
    html = arenas._repr_html_()
    assert html.count("<tr>") == 1 + len(llama_plan.arenas) and "parameters (persistent)" in html
    assert "allocated" in html and "peak" in html
    act = llama_plan.arenas["activations"]
    assert f"{min(1.0, act.lower_bound / act.size):.1%}" in html


def test_plan_allocate_is_arenas(llama_plan):
    arenas = llama_plan.allocate(zero=False)
    assert isinstance(arenas, mm.Arenas) and arenas.plan is llama_plan
    assert math.isclose(arenas.nbytes, llama_plan.total_bytes)
