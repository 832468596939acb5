"""Read what the memory prediction needs from a GGUF file: the architecture,
its hyperparameters, and every tensor's name, type, shape and byte size.

The `gguf` package (llama.cpp's own reader, the `emel[gguf]` extra) maps the
file; tensor data is never read. Anything that is not a readable GGUF of a
modelled architecture is a PlanError naming the file and what to do.
"""

from __future__ import annotations

import mmap
import struct
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


#: GGUF value types of a fixed size: type code -> bytes (gguf.md: u8 ... f64; 8 is a
#: string, 9 an array).
_FIXED_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4  # GGML_MAX_DIMS


def _check_counts(path: str) -> None:
    """Walk the header's counts (key-value pairs, arrays, strings, tensor infos)
    and check each against the bytes left, before the `gguf` reader sees them: it
    walks a damaged count item by item, and a flipped bit in an array's length
    kept it busy for minutes. Raises ValueError on the first count that cannot be."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        end = len(m)
        version = struct.unpack_from("<I", m, 4)[0]
        bo = "<" if version & 0xFFFF else ">"  # a big-endian file's version reads as n << 16
        n_tensors, n_kv = struct.unpack_from(bo + "QQ", m, 8)
        at = 24

        def count(n: int, each: int, what: str) -> None:
            if n * each > end - at:
                raise ValueError(f"{what} of {n:,} items at byte {at:,}: more than the {end - at:,} "
                                 f"bytes left")

        def u(fmt: str):
            nonlocal at
            v = struct.unpack_from(bo + fmt, m, at)[0]
            at += struct.calcsize(fmt)
            return v

        def string(what: str) -> bytes:
            nonlocal at
            n = u("Q")
            count(n, 1, what)
            at += n
            return m[at - n:at]

        def value(kind: int, what: str) -> None:
            nonlocal at
            if kind in _FIXED_SIZE:
                count(1, _FIXED_SIZE[kind], what)
                at += _FIXED_SIZE[kind]
            elif kind == _STRING:
                string(what)
            elif kind == _ARRAY:
                item, n = u("I"), u("Q")
                if item in _FIXED_SIZE:
                    count(n, _FIXED_SIZE[item], what)
                    at += n * _FIXED_SIZE[item]
                elif item in (_STRING, _ARRAY):
                    count(n, 8, what)  # each item starts with a u64 length
                    for _ in range(n):
                        value(item, what)
                else:
                    raise ValueError(f"{what}: unknown array item type {item}")
            else:
                raise ValueError(f"{what}: unknown value type {kind}")

        count(n_kv, 12, "the key-value table")  # a key's length and a value's type, at least
        for k in range(n_kv):
            name = string(f"key {k}").decode("utf-8", "replace")
            value(u("I"), f"key {k} ({name!r})")
        count(n_tensors, 24, "the tensor table")  # name length, dims, type, offset
        for k in range(n_tensors):
            string(f"tensor {k}'s name")
            n_dims = u("I")
            if n_dims > _MAX_DIMS:
                raise ValueError(f"tensor {k} has {n_dims} dimensions (at most {_MAX_DIMS})")
            count(n_dims + 1, 8, f"tensor {k}'s sizes")
            at += 8 * n_dims + 12


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
        _check_counts(path)
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
