"""Tiny random-weight GGUF files for llama.cpp ground truth and emel's tests.

A model here is a dict of hyperparameters (see TINY_MODELS); `write_tiny_gguf`
writes it with the `gguf` package (llama.cpp's own writer): byte-level SPM
vocabulary (<unk>, <s>, </s> and the 256 byte tokens), F32 norms and biases,
the matrices in `weight_type` (F16 by default), random values. The files are
a few hundred KB, and llama.cpp loads and runs them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: The grid's models: name -> hyperparameters. "tied": no output.weight
#: (llama.cpp reuses token_embd); qwen2 has Q/K/V biases.
TINY_MODELS = {
    "llama-gqa": dict(arch="llama", n_embd=64, n_head=4, n_head_kv=2, n_ff=160, n_layer=2,
                      n_ctx_train=8192, tied=False),
    # head_dim 64: a quantized KV cache gets llama.cpp's Hadamard rotation
    "llama-mha-tied": dict(arch="llama", n_embd=128, n_head=2, n_head_kv=2, n_ff=128, n_layer=3,
                           n_ctx_train=4096, tied=True),
    "qwen2": dict(arch="qwen2", n_embd=128, n_head=2, n_head_kv=1, n_ff=192, n_layer=2,
                  n_ctx_train=32768, tied=True),
    "llama-q8_0": dict(arch="llama", n_embd=128, n_head=4, n_head_kv=1, n_ff=224, n_layer=2,
                       n_ctx_train=2048, tied=False, weight_type="q8_0"),
    # head_dim 128 (Hadamard rotation of 128 for a quantized K); K-quant weights, which
    # llama.cpp repacks into a CPU_REPACK buffer on AVX2 machines (same bytes)
    "llama-q4_k": dict(arch="llama", n_embd=256, n_head=2, n_head_kv=1, n_ff=512, n_layer=2,
                       n_ctx_train=4096, tied=False, weight_type="q4_k"),
    # Q/K RMS norms, a head (64) wider than n_embd / n_head (32)
    "qwen3": dict(arch="qwen3", n_embd=128, n_head=4, n_head_kv=2, n_ff=192, n_layer=2,
                  n_ctx_train=40960, tied=True, head_dim=64),
    # scaled embeddings and Q, GeGLU, a 96-wide head (no Hadamard rotation)
    "gemma": dict(arch="gemma", n_embd=128, n_head=2, n_head_kv=1, n_ff=256, n_layer=2,
                  n_ctx_train=8192, tied=True, head_dim=96),
    # fused QKV and gate+up weights, scaled Q, MHA with 3 heads of 32
    "phi3": dict(arch="phi3", n_embd=96, n_head=3, n_head_kv=3, n_ff=192, n_layer=2,
                 n_ctx_train=4096, tied=False),
}

N_VOCAB = 259  # <unk> <s> </s> + 256 bytes

#: Models of realistic widths (head 128 or 64, 32000 tokens, contexts to 32768), two layers:
#: tens of MB, so the ground-truth script writes them but the tests use model_info().
LARGE_MODELS = {
    "llama-wide": dict(arch="llama", n_embd=1024, n_head=8, n_head_kv=2, n_ff=2816, n_layer=2,
                       n_ctx_train=32768, tied=False, weight_type="q4_k", n_vocab=32000),
    "qwen2-wide": dict(arch="qwen2", n_embd=896, n_head=14, n_head_kv=2, n_ff=4864, n_layer=2,
                       n_ctx_train=32768, tied=True, weight_type="q8_0", n_vocab=32000),
}


def write_tiny_gguf(path, arch="llama", n_embd=64, n_head=4, n_head_kv=2, n_ff=160, n_layer=2,
                    n_ctx_train=4096, tied=False, weight_type="f16", head_dim=None, n_vocab=N_VOCAB,
                    seed=0) -> Path:
    """Write one tiny model; returns its path. Per architecture, the tensors its
    llama.cpp loader wants: qwen2 Q/K/V biases, qwen3 Q/K norms, phi3 a fused
    QKV weight and a fused gate+up weight, gemma tied embeddings."""
    import gguf

    path = Path(path)
    rng = np.random.default_rng(seed)
    explicit_head = head_dim is not None
    head_dim = head_dim or n_embd // n_head
    n_embd_q, n_embd_kv = head_dim * n_head, head_dim * n_head_kv
    tied = tied or arch == "gemma"
    if weight_type not in ("f16", "f32", "q8_0", "q4_k"):
        raise ValueError(f"weight_type must be f16, f32, q8_0 or q4_k, got {weight_type!r}")

    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(head_dim)
    if explicit_head:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7, "q4_k": 15}[weight_type])
    w.add_tokenizer_model("llama")
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    tokens += [f"tok{i}".encode() for i in range(n_vocab - N_VOCAB)]  # a bigger vocabulary: plain tokens
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (n_vocab - N_VOCAB))  # UNKNOWN, CONTROL, BYTE, NORMAL
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def mat(name, rows, cols):  # numpy (rows, cols) = ggml ne (cols, rows)
        if weight_type == "q4_k":  # random blocks: llama.cpp only sizes them here
            q4k = gguf.GGMLQuantizationType.Q4_K
            blocks = rng.integers(0, 256, size=(rows, cols // 256 * 144), dtype=np.uint8)
            w.add_tensor(name, blocks, raw_dtype=q4k)
            return
        values = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
        if weight_type == "q8_0":
            q8 = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(name, gguf.quants.quantize(values, q8), raw_dtype=q8)
        else:
            w.add_tensor(name, values.astype(np.float16 if weight_type == "f16" else np.float32))

    for name, kind, shape in tensor_list(arch, n_embd, n_head, n_head_kv, n_ff, n_layer, tied, head_dim,
                                         n_vocab):
        if kind == "mat":
            mat(name, *shape)
        else:
            n = shape[0]
            w.add_tensor(name, (np.ones(n) if kind == "ones" else rng.standard_normal(n) * 0.02)
                         .astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def tensor_list(arch, n_embd, n_head, n_head_kv, n_ff, n_layer, tied, head_dim, n_vocab):
    """(name, kind, shape) of each tensor, in file order: kind "mat" (rows, cols) in the
    weight type, "vec" or "ones" (n,) in f32."""
    n_embd_q, n_embd_kv = head_dim * n_head, head_dim * n_head_kv
    out = [("token_embd.weight", "mat", (n_vocab, n_embd)), ("output_norm.weight", "ones", (n_embd,))]
    if not tied:
        out.append(("output.weight", "mat", (n_vocab, n_embd)))
    for i in range(n_layer):
        b = f"blk.{i}."
        out.append((b + "attn_norm.weight", "ones", (n_embd,)))
        if arch == "phi3":
            out.append((b + "attn_qkv.weight", "mat", (n_embd_q + 2 * n_embd_kv, n_embd)))
        else:
            out += [(b + "attn_q.weight", "mat", (n_embd_q, n_embd)),
                    (b + "attn_k.weight", "mat", (n_embd_kv, n_embd)),
                    (b + "attn_v.weight", "mat", (n_embd_kv, n_embd))]
        if arch == "qwen2":
            out += [(b + "attn_q.bias", "vec", (n_embd_q,)), (b + "attn_k.bias", "vec", (n_embd_kv,)),
                    (b + "attn_v.bias", "vec", (n_embd_kv,))]
        if arch == "qwen3":
            out += [(b + "attn_q_norm.weight", "ones", (head_dim,)), (b + "attn_k_norm.weight", "ones", (head_dim,))]
        out += [(b + "attn_output.weight", "mat", (n_embd, n_embd_q)), (b + "ffn_norm.weight", "ones", (n_embd,))]
        if arch == "phi3":
            out.append((b + "ffn_up.weight", "mat", (2 * n_ff, n_embd)))
        else:
            out += [(b + "ffn_gate.weight", "mat", (n_ff, n_embd)), (b + "ffn_up.weight", "mat", (n_ff, n_embd))]
        out.append((b + "ffn_down.weight", "mat", (n_embd, n_ff)))
    return out


def model_info(name, arch="llama", n_embd=64, n_head=4, n_head_kv=2, n_ff=160, n_layer=2,
               n_ctx_train=4096, tied=False, weight_type="f16", head_dim=None, n_vocab=N_VOCAB, seed=0):
    """What emel.memory.gguf.read_model would read from write_tiny_gguf's file, without
    writing it: for the big models the committed table also holds."""
    from emel.memory.gguf.reader import ModelInfo, TensorInfo
    head_dim = head_dim or n_embd // n_head
    tied = tied or arch == "gemma"
    blck, size = {"f32": (1, 4), "f16": (1, 2), "q8_0": (32, 34), "q4_k": (256, 144)}[weight_type]
    tensors = {}
    for tname, kind, shape in tensor_list(arch, n_embd, n_head, n_head_kv, n_ff, n_layer, tied, head_dim,
                                          n_vocab):
        if kind == "mat":
            rows, cols = shape
            tensors[tname] = TensorInfo(tname, weight_type, (cols, rows, 1, 1), rows * cols // blck * size, 0)
        else:
            tensors[tname] = TensorInfo(tname, "f32", (shape[0], 1, 1, 1), shape[0] * 4, 0)
    return ModelInfo(path=name, arch=arch, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer,
                     n_ff=n_ff, n_head=n_head, n_head_kv=n_head_kv, head_dim_k=head_dim, head_dim_v=head_dim,
                     n_vocab=n_vocab, n_expert=0, tensors=tensors)
