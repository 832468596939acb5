"""What a GGUF model needs in llama.cpp, predicted from the file alone.

    >>> from emel.memory import from_gguf
    >>> p = from_gguf("model.gguf", n_ctx=4096, n_ubatch=512, flash_attn=False)  # doctest: +SKIP
    >>> p.compute_bytes, p.kv_bytes, p.total_bytes                             # doctest: +SKIP

Pipeline: reader.py reads the metadata and tensor table (no weights);
llama_graph.py builds the graphs llama.cpp reserves (the prompt graph of
min(n_ctx, n_ubatch) tokens and the one-token graph, ggml_ops.py giving each
tensor ggml's shape and strides); this module replays llama.cpp's reserve
sequence (prompt, token, prompt) through emel's ggml-alloc model
(emel.memory.ggml, byte for byte ggml_gallocr) for the compute buffer, and
adds the weights, KV cache and output buffers as llama.cpp sizes them. The
same graph through emel's `auto` placement gives `compute_bytes_auto`.

Scope (docs/gguf.md): llama.cpp's CPU backend, one sequence, dense llama and
qwen2 models; the llama.cpp version measured is in tests/data/llamacpp_buffers.json.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import PlanError
from ..formats import format_bytes
from . import ggml_ops
from .llama_graph import Config, build_graph
from .reader import MODELLED_ARCHS, ModelInfo, read_model

__all__ = ["from_gguf", "GGUFPrediction", "read_model", "MODELLED_ARCHS", "KV_TYPES"]

CPU_ALIGNMENT = 32    # ggml-cpu's buffer alignment (TENSOR_ALIGNMENT)
MAX_SEQ = 256         # LLAMA_MAX_SEQ
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")


@dataclass
class GGUFPrediction:
    """Bytes of each buffer llama.cpp allocates for this model and context (CPU backend)."""
    path: str
    arch: str
    n_ctx: int            # as llama.cpp uses it (padded to a multiple of 256)
    n_batch: int
    n_ubatch: int
    n_seq: int
    flash_attn: bool
    type_k: str
    type_v: str
    model_bytes: int      # the weights' buffer
    kv_bytes: int         # the KV cache buffer
    output_bytes: int     # the logits buffer reserved at context creation
    compute_bytes: int    # the compute buffer ggml-alloc reserves (= llama.cpp's)
    compute_bytes_auto: int | None  # the same graphs placed by emel's `auto` (None: not asked)
    graph_nodes: int      # nodes of the prompt graph (llama.cpp logs "graph: nodes = ...")

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.kv_bytes + self.output_bytes + self.compute_bytes

    def total_with(self, compute: str = "ggml") -> int:
        """The total with llama.cpp's compute buffer ("ggml") or emel's `auto` placement of it."""
        if compute == "ggml":
            return self.total_bytes
        if compute != "auto" or self.compute_bytes_auto is None:
            raise ValueError(f"compute must be 'ggml' or 'auto' (with auto=True), got {compute!r}")
        return self.total_bytes - self.compute_bytes + self.compute_bytes_auto

    def to_dict(self) -> dict:
        d = asdict(self)
        d["total_bytes"] = self.total_bytes
        return d

    def __str__(self) -> str:
        def row(name, n):
            return f"  {name:<16}{format_bytes(n):>12}  {n:>16,} B"
        fa = "on" if self.flash_attn else "off"
        lines = [f"{self.path}: {self.arch}, n_ctx={self.n_ctx}, n_batch={self.n_batch}, "
                 f"n_ubatch={self.n_ubatch}, n_seq={self.n_seq}, flash_attn={fa}, "
                 f"KV {self.type_k}/{self.type_v}",
                 row("model (weights)", self.model_bytes), row("KV cache", self.kv_bytes),
                 row("output", self.output_bytes), row("compute", self.compute_bytes),
                 row("total", self.total_bytes)]
        if self.compute_bytes_auto is not None:
            saved = self.compute_bytes - self.compute_bytes_auto
            lines.append(row("compute (auto)", self.compute_bytes_auto)
                         + f"  ({saved:,} B less than ggml-alloc)")
        return "\n".join(lines)


def _align(n: int, a: int = CPU_ALIGNMENT) -> int:
    return (n + a - 1) // a * a


def _pad(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def configure(info: ModelInfo, n_ctx: int = 0, n_batch: int = 2048, n_ubatch: int = 512, n_seq: int = 1,
              flash_attn: bool | str = "auto", kv_type: str = "f16", type_v: str | None = None,
              allow_long_context: bool = False, kv_unified: bool = False) -> Config:
    """llama_context's adjustments of the parameters (llama-context.cpp), with
    PlanErrors where llama.cpp would refuse the configuration."""
    path = info.path

    def positive(name, v, minimum=1):
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise PlanError("INVALID_IR_SHAPES", f"{path}: {name} must be an integer >= {minimum}, got {v!r}")

    positive("n_ctx", n_ctx, 0)
    positive("n_batch", n_batch)
    positive("n_ubatch", n_ubatch)
    positive("n_seq", n_seq)
    if n_seq > MAX_SEQ:
        raise PlanError("INVALID_IR_SHAPES", f"{path}: n_seq={n_seq} is above llama.cpp's limit of "
                                             f"{MAX_SEQ} sequences (LLAMA_MAX_SEQ)")
    if flash_attn not in (True, False, "auto"):
        raise PlanError("INVALID_IR_SHAPES", f"{path}: flash_attn must be True, False or 'auto', "
                                             f"got {flash_attn!r}")
    type_k, type_v = kv_type, type_v or kv_type
    for name, t in (("kv_type", type_k), ("type_v", type_v)):
        if t not in KV_TYPES:
            raise PlanError("INVALID_IR_SHAPES", f"{path}: {name}={t!r} is not a KV cache type "
                                                 f"(one of {', '.join(KV_TYPES)})")
    fa = flash_attn is True or flash_attn == "auto"   # auto resolves to on for the CPU backend
    for name, t, head, width in (("K", type_k, info.head_dim_k, info.n_embd_k_gqa),
                                 ("V", type_v, info.head_dim_v, info.n_embd_v_gqa)):
        blck = ggml_ops.TYPES[t][0]
        if width % blck:
            raise PlanError("INVALID_IR_SHAPES",
                            f"{path}: {name} cache type {t} has blocks of {blck} values, which do not "
                            f"divide a cache row of {width}; use an f16 cache for this model")
        if fa and head % blck:  # llama_init_from_model checks the head only with flash attention
            raise PlanError("INVALID_IR_SHAPES",
                            f"{path}: {name} cache type {t} has blocks of {blck} values, which do not "
                            f"divide the head size {head}; llama.cpp refuses it with flash attention: "
                            f"use an f16 cache, or flash_attn=False with a quantized K only")
    if not fa and ggml_ops.TYPES[type_v][0] > 1:
        raise PlanError("INVALID_IR_SHAPES", f"{path}: a quantized V cache ({type_v}) needs flash "
                                             f"attention (llama.cpp refuses it without): flash_attn=True")
    ctx = n_ctx or info.n_ctx_train
    batch = min(ctx, n_batch)
    ubatch = min(batch, n_ubatch)
    padded = _pad(ctx, 256)
    # each sequence gets its own KV stream of n_ctx / n_seq cells, padded again (unless unified)
    ctx_seq = padded if kv_unified else _pad(padded // n_seq, 256)
    if ctx_seq == 0:
        raise PlanError("INVALID_IR_SHAPES", f"{path}: n_ctx={ctx} leaves no cells for each of {n_seq} "
                                             f"sequences; raise n_ctx or pass kv_unified=True")
    per_seq = ctx if kv_unified else ctx // n_seq   # what a sequence may hold (before padding)
    if per_seq > info.n_ctx_train and not allow_long_context:
        each = "" if n_seq == 1 or kv_unified else f" ({per_seq} per sequence)"
        most = info.n_ctx_train * (1 if kv_unified else n_seq)
        raise PlanError("SHAPE_ENVELOPE_EXCEEDED",
                        f"{path}: n_ctx={ctx}{each} is above the model's trained "
                        f"context ({info.n_ctx_train}); use n_ctx <= {most}, or pass "
                        f"allow_long_context=True (emel-fit: --allow-long-context) if you extend it "
                        f"with RoPE scaling")
    return Config(n_ctx=ctx_seq if kv_unified else ctx_seq * n_seq, n_batch=batch, n_ubatch=ubatch,
                  n_seq=n_seq, flash_attn=fa, type_k=type_k, type_v=type_v, kv_unified=kv_unified,
                  kv_size=ctx_seq)


def _to_allocator_graph(graph: dict):
    """The ggml_ops tensors as emel.memory.ggml tensors (flags, views, layouts)."""
    from .. import ggml as G
    made: dict = {}
    order = graph["leafs"] + graph["nodes"]
    for i, t in enumerate(order):
        flags = (t.flags & (G.INPUT | G.OUTPUT)) | (G.HAS_DATA if t.has_data else 0)
        made[id(t)] = G.Tensor(name=f"{i}:{t.name or t.op}", nbytes=t.nbytes, op=t.op, flags=flags,
                               layout=(t.type, t.ne, t.nb))
    for t in order:
        x = made[id(t)]
        x.src = [None if s is None else made[id(s)] for s in t.src]
        if t.view_src is not None:
            x.view_src, x.view_offs = made[id(t.view_src)], t.view_offs
    return G.Graph(nodes=[made[id(t)] for t in graph["nodes"]], leafs=[made[id(t)] for t in graph["leafs"]])


def compute_buffer(info: ModelInfo, cfg: Config, strategy: str = "ggml", time_budget_ms: int = 200) -> int:
    """llama_context::sched_reserve: reserve the prompt graph, the one-token
    graph, the prompt graph again, in one graph allocator whose buffer only
    grows; its size. strategy="ggml" is ggml-alloc itself."""
    from .. import ggml as G
    n_tokens = min(cfg.n_ctx, cfg.n_ubatch)
    pp = _to_allocator_graph(build_graph(info, cfg, n_tokens, n_tokens))
    tg = _to_allocator_graph(build_graph(info, cfg, cfg.n_seq, cfg.n_seq))
    alloc = G.GraphAllocator(G.BufferType(alignment=CPU_ALIGNMENT), strategy=strategy,
                             time_budget_ms=time_budget_ms)
    for graph in (pp, tg, pp):
        if not alloc.reserve(graph):
            raise PlanError("ALLOCATION_OVERFLOW", f"{info.path}: the compute graph could not be reserved")
    return alloc.get_buffer_size(0)


def kv_bytes(info: ModelInfo, cfg: Config) -> int:
    """One K and one V tensor per layer, kv_size cells, in one CPU buffer."""
    k = _row(cfg.type_k, info.n_embd_k_gqa) * cfg.kv_size * cfg.n_stream
    v = _row(cfg.type_v, info.n_embd_v_gqa) * cfg.kv_size * cfg.n_stream
    return info.n_layer * (_align(k) + _align(v))


def _row(type_: str, n: int) -> int:
    blck, size = ggml_ops.TYPES[type_]
    return size * n // blck


def model_bytes(info: ModelInfo) -> int:
    """The weights' CPU buffer: every tensor of the file, each aligned."""
    return sum(_align(t.nbytes) for t in info.tensors.values())


def output_bytes(info: ModelInfo, cfg: Config) -> int:
    """llama_context::output_reserve(n_seq) at creation: the logits of one token per sequence."""
    return info.n_vocab * cfg.n_seq * 4


def from_gguf(path, n_ctx: int = 0, n_ubatch: int = 512, n_seq: int = 1, flash_attn: bool | str = "auto",
              kv_type: str = "f16", *, type_v: str | None = None, n_batch: int = 2048,
              kv_unified: bool = False, allow_long_context: bool = False, auto: bool = True,
              time_budget_ms: int = 200) -> GGUFPrediction:
    """Predict llama.cpp's buffers for the GGUF at ``path`` (CPU backend).

    ``n_ctx`` 0 is the trained context, as in llama.cpp; ``flash_attn`` "auto"
    is on (what llama.cpp's auto picks on the CPU); ``kv_type`` is the K cache
    type and, unless ``type_v`` is given, the V cache type. ``auto=False``
    skips the `auto` placement of the compute graph (faster)."""
    info = path if isinstance(path, ModelInfo) else read_model(path)
    cfg = configure(info, n_ctx, n_batch, n_ubatch, n_seq, flash_attn, kv_type, type_v, allow_long_context,
                    kv_unified)
    n_tokens = min(cfg.n_ctx, cfg.n_ubatch)
    return GGUFPrediction(
        path=info.path, arch=info.arch, n_ctx=cfg.n_ctx, n_batch=cfg.n_batch, n_ubatch=cfg.n_ubatch,
        n_seq=cfg.n_seq, flash_attn=cfg.flash_attn, type_k=cfg.type_k, type_v=cfg.type_v,
        model_bytes=model_bytes(info), kv_bytes=kv_bytes(info, cfg), output_bytes=output_bytes(info, cfg),
        compute_bytes=compute_buffer(info, cfg),
        compute_bytes_auto=compute_buffer(info, cfg, "auto", time_budget_ms) if auto else None,
        graph_nodes=len(build_graph(info, cfg, n_tokens, n_tokens)["nodes"]))
