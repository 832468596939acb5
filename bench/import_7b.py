"""Import a Llama-7B-shaped decoder from PyTorch on the meta device, and plan it.

    python bench/import_7b.py [--layers 32] [--seq 2048] [--training] [-o OUT.json]

The model is defined here (RMSNorm, rotary embeddings, grouped-query attention,
SwiGLU; the Llama-2-7B shapes: d 4096, 32 heads, ffn 11008, vocab 32000) and
built under ``torch.device("meta")``: its 6.7 billion parameters take no
memory. ``from_torch`` traces it with fake tensors. The table reports the
import time, the planning time, and the peak resident memory of the process
(``resource.getrusage``), which must stay far below the model's size.
"""

from __future__ import annotations

import argparse
import resource
import time

import torch
from torch import nn

from _common import print_table, write_json  # noqa: E402

import emel.memory as mm  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin):
        b, s, d = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, d))


class MLP(nn.Module):
    def __init__(self, d, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(d, ffn, bias=False)
        self.up_proj = nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d), RMSNorm(d)
        self.self_attn, self.mlp = Attention(d, heads, kv_heads), MLP(d, ffn)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, vocab=32000, d=4096, layers=32, heads=32, kv_heads=32, ffn=11008,
                 max_seq=4096):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Layer(d, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        head_dim = d // heads
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_seq).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos_cached", angles.cos(), persistent=False)
        self.register_buffer("sin_cached", angles.sin(), persistent=False)

    def forward(self, input_ids):
        s = input_ids.shape[1]
        cos, sin = self.cos_cached[:s], self.sin_cached[:s]
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--training", action="store_true", help="the joint forward+backward graph")
    p.add_argument("-o", "--out", help="JSON output (default bench/results/import_7b.json)")
    args = p.parse_args()

    rss_start = peak_rss_mib()
    start = time.perf_counter()
    with torch.device("meta"):
        model = Llama(layers=args.layers)
        tokens = torch.zeros(args.batch, args.seq, dtype=torch.long)
    build_s = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())

    start = time.perf_counter()
    graph = mm.from_torch(model, (tokens,), training=args.training)
    import_s = time.perf_counter() - start
    rss_import = peak_rss_mib()

    start = time.perf_counter()
    plan = mm.plan(graph, mode="backward" if args.training else "inference", strategy="auto")
    plan_s = time.perf_counter() - start
    rss_end = peak_rss_mib()

    a = plan.arenas["activations"]
    row = {"model": f"llama-7b-shape L{args.layers} s{args.seq} b{args.batch}"
                    f"{' training' if args.training else ''}",
           "params_b": params / 1e9, "tensors": len(graph.tensors), "nodes": len(graph.nodes),
           "build_s": build_s, "import_s": import_s, "plan_s": plan_s,
           "rss_before_mib": rss_start, "peak_rss_import_mib": rss_import, "peak_rss_mib": rss_end,
           "parameters_gib": plan.arenas["parameters"].size / 2**30,
           "activations_gib": a.size / 2**30, "activations_bound_gib": a.lower_bound / 2**30}
    print_table([row], [("model", "model", ""), ("params_b", "params (B)", ".2f"),
                        ("tensors", "tensors", "d"), ("nodes", "nodes", "d"),
                        ("import_s", "import s", ".1f"), ("plan_s", "plan s", ".2f"),
                        ("peak_rss_mib", "peak RSS MiB", ".0f"),
                        ("parameters_gib", "params GiB", ".2f"),
                        ("activations_gib", "activations GiB", ".3f"),
                        ("activations_bound_gib", "bound GiB", ".3f")])
    write_json("import_7b", {"rows": [row], "torch": torch.__version__}, args.out)


if __name__ == "__main__":
    main()
