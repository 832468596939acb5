"""llama.cpp's compute graph for the llama family, built as llama.cpp builds
it (src/models/llama.cpp, qwen2.cpp, qwen3.cpp, gemma.cpp, phi3.cpp and the
helpers in src/llama-graph.cpp, llama-kv-cache.cpp), shapes only.

The architectures differ in a few places only (ARCH_GRAPH): Q/K RMS norms
before RoPE (qwen3), the embeddings scaled by sqrt(n_embd) (gemma), Q scaled
after RoPE (gemma, phi3), the FFN residual added first (phi3); a fused QKV
weight or a fused gate+up FFN weight (phi3) follow from the tensors the file
holds.

The order of `build_forward_expand` calls is llama.cpp's: it decides the
node and leaf order, and so what ggml-alloc reuses. Weights and the KV cache
have data (they live in their own buffers); the inputs are flagged INPUT and
the two results (result_norm, result_output) OUTPUT, as in llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ggml import build_forward
from . import ggml_ops as g
from ..errors import PlanError
from .reader import ModelInfo

OUTPUT = 2
#: ggml types whose K (or V) cache llama.cpp rotates with a Hadamard matrix (attn_rot_k/v).
QUANTIZED = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl"}

#: What each modelled architecture's builder adds to llama's graph.
ARCH_GRAPH = {
    "llama": {}, "qwen2": {},
    "qwen3": {"qk_norm": True},
    "gemma": {"embd_scale": True, "q_scale": True},
    "phi3": {"q_scale": True, "residual_first": True},
}


@dataclass(frozen=True)
class Config:
    """A llama_context configuration, after llama.cpp's own adjustments."""
    n_ctx: int          # padded to a multiple of 256 (per sequence), as llama.cpp pads it
    n_batch: int
    n_ubatch: int
    n_seq: int
    flash_attn: bool
    type_k: str
    type_v: str
    kv_unified: bool = False
    kv_size: int = 0    # cells per KV stream: n_ctx_seq

    @property
    def n_stream(self) -> int:
        """KV streams: one per sequence unless the cache is unified."""
        return 1 if self.kv_unified else self.n_seq


def _row_size(type_: str, n: int) -> int:
    blck, size = g.TYPES[type_]
    return size * n // blck


def build_graph(info: ModelInfo, cfg: Config, n_tokens: int, n_outputs: int) -> dict:
    """The graph llama_context::graph_reserve builds for a ubatch of n_tokens
    tokens over cfg.n_seq sequences with n_outputs outputs: {"nodes": [...], "leafs": [...]}.
    A tensor that is missing or does not fit the graph is a PlanError naming the file and the tensor."""
    try:
        return _build_graph(info, cfg, n_tokens, n_outputs)
    except PlanError as e:  # raised by the graph's ops, which do not know the file
        raise PlanError(e.code, f"{info.path}: {e.message}", tensor=e.tensor) from None


def _build_graph(info: ModelInfo, cfg: Config, n_tokens: int, n_outputs: int) -> dict:
    n_seqs = cfg.n_seq
    n_tokens = -(-n_tokens // n_seqs) * n_seqs   # graph_reserve rounds up to a multiple of n_seqs
    # ggml_build_forward_expand calls, in llama.cpp's order: a tensor's sources never
    # change once it exists, so expanding them all at the end gives the same graph.
    roots: list = []
    expand = roots.append
    tensors = info.tensors
    weights: dict = {}

    def w(name, required=True):  # a weight leaf, once per name; None when an optional one is absent
        if name not in tensors:
            if required:
                raise PlanError("INVALID_IR_SHAPES", f"no tensor {name!r}, which the {info.arch} graph "
                                f"needs; not a complete model", tensor=name)
            return None
        if name not in weights:
            ti = tensors[name]
            weights[name] = g.new_tensor(ti.type, *ti.ne, name=name, has_data=True)
        return weights[name]

    n_embd, hd, n_head, n_head_kv = info.n_embd, info.head_dim_k, info.n_head, info.n_head_kv
    n_kv = cfg.kv_size
    n_stream = cfg.n_stream              # streams of the cache, and of this ubatch (one per sequence)
    n_embd_k, n_embd_v = info.n_embd_k_gqa, info.n_embd_v_gqa
    v_trans = not cfg.flash_attn
    arch = ARCH_GRAPH[info.arch]
    n_embd_q = hd * n_head

    # build_inp_embd: both input paths are added (ggml_build_forward_select)
    inp_tokens = g.set_input(g.new_tensor("i32", n_tokens, name="inp_tokens"))
    inp_embd = g.set_input(g.new_tensor("f32", n_embd, n_tokens, name="inp_embd"))
    embd = g.get_rows(w("token_embd.weight"), inp_tokens)
    expand(embd)
    expand(inp_embd)
    if arch.get("embd_scale"):
        embd = g.unary_like("SCALE", embd)
    inp_pos = g.set_input(g.new_tensor("i32", n_tokens, name="inp_pos"))
    # build_attn_inp_kv
    k_idxs = g.set_input(g.new_tensor("i64", n_tokens, name="attn_inp_k_idxs"))
    v_idxs = g.set_input(g.new_tensor("i64", n_tokens * n_embd_v if v_trans else n_tokens,
                                      name="attn_inp_v_idxs"))
    kq_mask = g.set_input(g.new_tensor("f16" if cfg.flash_attn else "f32", n_kv, n_tokens // n_stream, 1,
                                       n_stream, name="attn_inp_kq_mask"))
    k_rot = v_rot = None
    if cfg.type_k in QUANTIZED and hd % 64 == 0:
        nrot = 64
        while hd % (nrot * 2) == 0:
            nrot *= 2
        k_rot = g.set_input(g.new_tensor("f32", nrot, nrot, name="attn_inp_k_rot"))
    if cfg.type_v in QUANTIZED and info.head_dim_v % 64 == 0:
        v_rot = g.set_input(g.new_tensor("f32", 64, 64, name="attn_inp_v_rot"))
    out_ids = g.set_input(g.new_tensor("i32", n_outputs, name="out_ids"))

    def rms_norm_mul(x, weight):
        return g.unary_like("MUL", g.unary_like("RMS_NORM", x), weight)

    def linear(x, weight, bias=None):
        y = g.mul_mat(weight, x)
        return g.unary_like("ADD", y, bias) if bias is not None else y

    def hadamard(x, rot):  # llama_mul_mat_hadamard
        n = rot.ne[0]
        r = g.reshape(x, n, _nelements(x) // n) if g.is_contiguous(x) else g.cont(x, n, _nelements(x) // n)
        return g.reshape(g.mul_mat(rot, r), *x.ne)

    inpL = embd
    for il in range(info.n_layer):
        b = f"blk.{il}."
        inpSA = inpL
        cur = rms_norm_mul(inpL, w(b + "attn_norm.weight"))
        rope_factors = w("rope_freqs.weight", required=False)
        if b + "attn_qkv.weight" in tensors:  # build_qkv's fused path: three views of one product
            qkv = linear(cur, w(b + "attn_qkv.weight"), w(b + "attn_qkv.bias", required=False))
            q = g.view(qkv, (hd, n_head, n_tokens), (_row_size(qkv.type, hd), qkv.nb[1]), 0)
            k = g.view(qkv, (hd, n_head_kv, n_tokens), (_row_size(qkv.type, hd), qkv.nb[1]),
                       _row_size(qkv.type, n_embd_q))
            v = g.view(qkv, (info.head_dim_v, n_head_kv, n_tokens),
                       (_row_size(qkv.type, info.head_dim_v), qkv.nb[1]),
                       _row_size(qkv.type, n_embd_q + n_embd_k))
        else:
            q = g.reshape(linear(cur, w(b + "attn_q.weight"), w(b + "attn_q.bias", required=False)), hd, n_head, n_tokens)
            k = g.reshape(linear(cur, w(b + "attn_k.weight"), w(b + "attn_k.bias", required=False)), hd, n_head_kv, n_tokens)
            v = g.reshape(linear(cur, w(b + "attn_v.weight"), w(b + "attn_v.bias", required=False)),
                          info.head_dim_v, n_head_kv, n_tokens)
        if arch.get("qk_norm"):
            q = rms_norm_mul(q, w(b + "attn_q_norm.weight"))
            k = rms_norm_mul(k, w(b + "attn_k_norm.weight"))
        q = g.unary_like("ROPE", q, inp_pos, *([rope_factors] if rope_factors is not None else []))
        k = g.unary_like("ROPE", k, inp_pos, *([rope_factors] if rope_factors is not None else []))
        if arch.get("q_scale"):
            q = g.unary_like("SCALE", q)
        # build_attn (KV cache)
        if k_rot is not None:
            q, k = hadamard(q, k_rot), hadamard(k, k_rot)
        if v_rot is not None:
            v = hadamard(v, v_rot)
        expand(q)
        expand(v)
        expand(k)
        cache_k = g.new_tensor(cfg.type_k, n_embd_k, n_kv, n_stream, name=f"cache_k_l{il}", has_data=True)
        cache_v = g.new_tensor(cfg.type_v, n_embd_v, n_kv, n_stream, name=f"cache_v_l{il}", has_data=True)
        # cpy_k (several streams: one 2-d buffer, the row indices are global)
        k2 = g.view(k, (n_embd_k, n_tokens), (k.nb[2],), 0)
        k_dst = g.reshape(cache_k, n_embd_k, n_kv * n_stream) if n_stream > 1 else cache_k
        expand(g.set_rows(k_dst, k2, k_idxs))
        # cpy_v
        if not v_trans:
            v2 = g.view(v, (n_embd_v, n_tokens), (v.nb[2],), 0)
            v_dst = g.reshape(cache_v, n_embd_v, n_kv * n_stream) if n_stream > 1 else cache_v
            expand(g.set_rows(v_dst, v2, v_idxs))
        else:  # one row per value of the transposed cache; a strided V is copied first
            v2 = (g.reshape(v, n_embd_v, n_tokens) if _row_size(v.type, n_embd_v) == v.nb[2]
                  else g.cont(v, n_embd_v, n_tokens))
            v_view = g.reshape(cache_v, 1, _nelements(cache_v))
            v2 = g.reshape(v2, 1, _nelements(v2))
            expand(g.set_rows(v_view, v2, v_idxs))
        # get_k / get_v
        kk = g.view(cache_k, (hd, n_head_kv, n_kv, n_stream),
                    (_row_size(cfg.type_k, hd), _row_size(cfg.type_k, n_embd_k),
                     _row_size(cfg.type_k, n_embd_k * n_kv)), 0)
        if not v_trans:
            vv = g.view(cache_v, (info.head_dim_v, n_head_kv, n_kv, n_stream),
                        (_row_size(cfg.type_v, info.head_dim_v), _row_size(cfg.type_v, n_embd_v),
                         _row_size(cfg.type_v, n_embd_v * n_kv)), 0)
        else:
            vv = g.view(cache_v, (n_kv, n_head_kv, info.head_dim_v, n_stream),
                        (_row_size(cfg.type_v, n_kv * info.head_dim_v), _row_size(cfg.type_v, n_kv),
                         _row_size(cfg.type_v, n_kv * n_embd_v)), 0)
        # build_attn_mha
        per = q.ne[2] // n_stream
        qv = g.view(q, (q.ne[0], q.ne[1], per, n_stream), (q.nb[1], q.nb[2], q.nb[2] * per), 0)
        qp = g.permute(qv, 0, 2, 1, 3)
        kp = g.permute(kk, 0, 2, 1, 3)
        vp = g.permute(vv, 0, 2, 1, 3)
        if cfg.flash_attn:
            att = g.flash_attn_ext(qp, kp, vp, kq_mask)
            att = g.reshape(att, att.ne[0] * att.ne[1], att.ne[2] * att.ne[3])
        else:
            kq = g.mul_mat(kp, qp)
            kq = g.unary_like("SOFT_MAX", kq, kq_mask)
            kqv = g.mul_mat(vp, kq)
            perm = g.permute(kqv, 0, 2, 1, 3)
            att = g.cont(perm, perm.ne[0] * perm.ne[1], perm.ne[2] * perm.ne[3])
        expand(att)
        if v_rot is not None:
            att = hadamard(att, v_rot)
        cur = linear(att, w(b + "attn_output.weight"), w(b + "attn_output.bias", required=False))
        if il == info.n_layer - 1:
            cur = g.get_rows(cur, out_ids)
            inpSA = g.get_rows(inpSA, out_ids)
        ffn_inp = g.unary_like("ADD", cur, inpSA)
        cur = rms_norm_mul(ffn_inp, w(b + "ffn_norm.weight"))
        up = g.mul_mat(w(b + "ffn_up.weight"), cur)
        if b + "ffn_gate.weight" in tensors:   # SwiGLU / GeGLU of two products
            act = g.glu_split(g.mul_mat(w(b + "ffn_gate.weight"), cur), up)
        else:                                  # one product, gate and up halves (phi3)
            act = g.glu(up)
        cur = g.mul_mat(w(b + "ffn_down.weight"), act)
        # phi3 adds (residual, ffn) where the others add (ffn, residual): the visit order differs
        inpL = (g.unary_like("ADD", ffn_inp, cur) if arch.get("residual_first")
                else g.unary_like("ADD", cur, ffn_inp))

    result_norm = rms_norm_mul(inpL, w("output_norm.weight"))
    result_norm.flags |= OUTPUT
    logits = linear(result_norm, w("output.weight", required=False) or w("token_embd.weight"), w("output.bias", required=False))
    logits.flags |= OUTPUT
    expand(logits)
    graph = build_forward(roots)
    return {"nodes": graph.nodes, "leafs": graph.leafs}


def _nelements(t) -> int:
    return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]
