"""Read what the memory prediction needs from a GGUF file: the architecture,
its hyperparameters, and every tensor's name, type, shape and byte size.

The `gguf` package (llama.cpp's own reader, the `emel[gguf]` extra) maps the
file; tensor data is never read. Anything that is not a readable GGUF of a
modelled architecture is a PlanError naming the file and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PlanError
from . import ggml_ops

#: Architectures whose llama.cpp graph emel builds (llama_model_llama, _qwen2,
#: _qwen3, _gemma, _phi3 in llama.cpp: llama's graph with small differences,
#: llama_graph.ARCH_GRAPH). Mistral 7B and most Llama derivatives are "llama".
MODELLED_ARCHS = ("llama", "qwen2", "qwen3", "gemma", "phi3")


@dataclass
class TensorInfo:
    name: str
    type: str        # ggml type name, lower case: "f16", "q4_k", ...
    ne: tuple        # ggml sizes, innermost first
    nbytes: int
    offset: int      # of the data, from the file's start


@dataclass
class ModelInfo:
    path: str
    arch: str
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    n_expert: int
    tensors: dict = field(default_factory=dict)   # name -> TensorInfo, in file order

    @property
    def n_embd_k_gqa(self) -> int:
        return self.head_dim_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        return self.head_dim_v * self.n_head_kv


def _require_gguf():
    try:
        import gguf
    except ImportError as e:
        raise ImportError("reading GGUF files needs the gguf package: pip install 'emel[gguf]'") from e
    # every ggml type a file may hold (K-quants, i-quants, ...): block size and bytes per block
    for qtype, (blck, size) in gguf.GGML_QUANT_SIZES.items():
        ggml_ops.TYPES.setdefault(qtype.name.lower(), (blck, size))
    return gguf


def _scalar(reader, key: str, path: str, default=None, required=True):
    f = reader.fields.get(key)
    if f is None:
        if required and default is None:
            raise PlanError("INVALID_IR_SHAPES",
                            f"{path}: GGUF metadata has no {key!r}; the file is incomplete or not a "
                            f"llama.cpp model (re-convert it with llama.cpp's convert_hf_to_gguf.py)")
        return default
    values = [f.parts[i] for i in f.data]
    if len(values) == 1 and getattr(values[0], "dtype", None) is not None and values[0].dtype.kind == "u" \
            and values[0].dtype.itemsize == 1:  # a string: its bytes
        return bytes(values[0]).decode("utf-8", "replace")
    flat = [v.tolist()[0] if hasattr(v, "tolist") and len(v) == 1 else v for v in values]
    if len(flat) == 1:
        return flat[0]
    if all(x == flat[0] for x in flat):   # a per-layer array with one value
        return flat[0]
    raise PlanError("INVALID_IR_SHAPES",
                    f"{path}: {key} differs between layers ({sorted(set(flat))[:4]}...); per-layer "
                    f"head counts are not modelled yet")


def read_model(path) -> ModelInfo:
    """The metadata and tensor infos of the GGUF at `path` (no tensor data is read)."""
    gguf = _require_gguf()
    path = str(path)
    p = Path(path)
    if not p.is_file():
        raise PlanError("INVALID_IR_SHAPES", f"{path}: no such file; give the path of a .gguf model")
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise PlanError("INVALID_IR_SHAPES",
                        f"{path}: not a GGUF file (it starts with {magic!r}, not b'GGUF'); convert the "
                        f"model with llama.cpp's convert_hf_to_gguf.py or download a .gguf build")
    try:
        reader = gguf.GGUFReader(path, "r")
        raw_tensors = list(reader.tensors)
    except Exception as e:  # the reader raises ValueError, IndexError, struct errors ... on a broken file
        raise PlanError("INVALID_IR_SHAPES",
                        f"{path}: cannot read the GGUF header or tensor table ({type(e).__name__}: "
                        f"{str(e)[:200]}); the file is truncated or damaged: download it again") from None
    size = p.stat().st_size
    tensors = {}
    for t in raw_tensors:
        ti = TensorInfo(name=t.name, type=t.tensor_type.name.lower(),
                        ne=tuple(int(x) for x in t.shape) + (1,) * (4 - len(t.shape)),
                        nbytes=int(t.n_bytes), offset=int(t.data_offset))
        if ti.offset + ti.nbytes > size:
            raise PlanError("INVALID_IR_SHAPES",
                            f"{path}: tensor {ti.name!r} ends at byte {ti.offset + ti.nbytes:,} but the "
                            f"file has {size:,} bytes; the file is truncated: download it again",
                            tensor=ti.name)
        tensors[ti.name] = ti

    arch = _scalar(reader, "general.architecture", path)
    if arch not in MODELLED_ARCHS:
        raise PlanError("INVALID_IR_SHAPES",
                        f"{path}: architecture {arch!r} is not modelled yet (modelled: "
                        f"{', '.join(MODELLED_ARCHS)}); measure it with llama.cpp instead "
                        f"(llama-cli -lv 4 prints its buffer sizes), or open an issue for {arch!r}")

    def key(name, default=None, required=True):
        return _scalar(reader, f"{arch}.{name}", path, default, required)

    n_embd, n_head = int(key("embedding_length")), int(key("attention.head_count"))
    n_head_kv = int(key("attention.head_count_kv", n_head))
    if n_head <= 0 or n_head_kv <= 0 or n_embd % n_head:
        raise PlanError("INVALID_IR_SHAPES", f"{path}: {n_head} heads do not divide n_embd={n_embd}")
    head_k = int(key("attention.key_length", n_embd // n_head))
    head_v = int(key("attention.value_length", n_embd // n_head))
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    n_vocab = key("vocab_size", 0, required=False) or (len(tokens.data) if tokens is not None else 0)
    if not n_vocab and "token_embd.weight" in tensors:
        n_vocab = tensors["token_embd.weight"].ne[1]
    info = ModelInfo(path=path, arch=arch, n_ctx_train=int(key("context_length")), n_embd=n_embd,
                     n_layer=int(key("block_count")), n_ff=int(key("feed_forward_length")),
                     n_head=n_head, n_head_kv=n_head_kv, head_dim_k=head_k, head_dim_v=head_v,
                     n_vocab=int(n_vocab), n_expert=int(key("expert_count", 0, required=False) or 0),
                     tensors=tensors)
    if info.n_expert:
        raise PlanError("INVALID_IR_SHAPES",
                        f"{path}: a mixture-of-experts {arch} model ({info.n_expert} experts) is not "
                        f"modelled yet; only dense llama/qwen2 models are")
    for name in ("token_embd.weight", "output_norm.weight"):
        if name not in tensors:
            raise PlanError("INVALID_IR_SHAPES", f"{path}: no tensor {name!r}; not a complete {arch} "
                                                 f"model", tensor=name)
    return info
