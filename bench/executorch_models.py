"""Small models for the ExecuTorch memory-planning bench and tests.

Every builder returns ``(module, example_inputs)`` with random weights
(``torch.manual_seed(0)``): torch.nn layers and ``transformers`` configs, nothing
downloaded. ``lower(name)`` exports one to an edge program; ``to_program``
plans it with a memory planning pass and ``run`` executes it in
``executorch.runtime``.
"""

from __future__ import annotations

import copy
from typing import Callable, Dict, Tuple

import torch
from torch import nn


class _Wrap(nn.Module):
    """Call a transformers model with fixed keyword arguments; return one tensor."""

    def __init__(self, model: nn.Module, field: str, **kwargs) -> None:
        super().__init__()
        self.model, self.field, self.kwargs = model, field, kwargs

    def forward(self, *args):
        out = self.model(*args, **self.kwargs)
        return getattr(out, self.field) if self.field else out[0]


class _ResBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.a, self.bn_a = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.b, self.bn_b = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)

    def forward(self, x):
        h = torch.relu(self.bn_a(self.a(x)))
        return torch.relu(x + self.bn_b(self.b(h)))


class CNN(nn.Module):
    """Conv + BatchNorm + residual blocks, downsampling twice."""

    def __init__(self, c: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())
        self.stages = nn.Sequential(_ResBlock(c), nn.Conv2d(c, 2 * c, 3, stride=2, padding=1),
                                    _ResBlock(2 * c), nn.Conv2d(2 * c, 4 * c, 3, stride=2, padding=1),
                                    _ResBlock(4 * c))
        self.head = nn.Linear(4 * c, classes)

    def forward(self, x):
        return self.head(self.stages(self.stem(x)).mean(dim=(2, 3)))


class UNet(nn.Module):
    """Two-level U-Net: the encoder's maps wait for the decoder (long lifetimes)."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.ReLU(), nn.Conv2d(o, o, 3, padding=1), nn.ReLU())
        self.e1, self.e2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.u2, self.d2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2), block(4 * c, 2 * c)
        self.u1, self.d1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2), block(2 * c, c)
        self.out = nn.Conv2d(c, 1, 1)

    def forward(self, x):
        e1 = self.e1(x)
        e2 = self.e2(nn.functional.max_pool2d(e1, 2))
        m = self.mid(nn.functional.max_pool2d(e2, 2))
        d2 = self.d2(torch.cat([self.u2(m), e2], 1))
        return self.out(self.d1(torch.cat([self.u1(d2), e1], 1)))


class RNN(nn.Module):
    def __init__(self, kind: str = "lstm", d: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(d, d, num_layers=layers, batch_first=True)
        self.head = nn.Linear(d, 8)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class KVDecoder(nn.Module):
    """A decoder step with its K/V caches as mutable buffers (index_copy_ at the position)."""

    def __init__(self, d: int = 64, heads: int = 4, layers: int = 2, max_len: int = 32,
                 vocab: int = 128) -> None:
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.emb, self.out = nn.Embedding(vocab, d), nn.Linear(d, vocab)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.proj = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                                 for _ in range(layers))
        for i in range(layers):
            self.register_buffer(f"k{i}", torch.zeros(1, heads, max_len, self.dh))
            self.register_buffer(f"v{i}", torch.zeros(1, heads, max_len, self.dh))
        self.layers = layers

    def forward(self, tokens, pos):
        x = self.emb(tokens)                                   # [1, T, d]
        t = x.shape[1]
        for i in range(self.layers):
            q, k, v = self.qkv[i](x).split(x.shape[-1], dim=-1)
            q, k, v = (z.view(1, t, self.heads, self.dh).transpose(1, 2) for z in (q, k, v))
            kc, vc = getattr(self, f"k{i}"), getattr(self, f"v{i}")
            kc.index_copy_(2, pos, k)
            vc.index_copy_(2, pos, v)
            att = torch.softmax(q @ kc.transpose(-1, -2) / self.dh ** 0.5, dim=-1) @ vc
            x = x + self.proj[i](att.transpose(1, 2).reshape(1, t, -1))
            x = x + self.mlp[i](x)
        return self.out(x)


class Cond(nn.Module):
    """torch.cond between two branches: ExecuTorch plans each branch as a submodule and
    reserves its bytes at the bottom of the parent's arena (input_mem_buffer_sizes)."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        h = torch.relu(self.a(x))
        y = torch.cond(h.sum() > 0, lambda t: self.b(t) * 2, lambda t: self.b(t) - 1, (h,))
        return torch.tanh(y) + h


def _hf(cls_name: str, config_name: str, field: str = "last_hidden_state", **config):
    import transformers
    cfg = getattr(transformers, config_name)(**config)
    cfg._attn_implementation = "eager"
    if "." in cls_name:          # a class transformers does not export at the top
        import importlib
        mod, _, cls_name = cls_name.rpartition(".")
        model = getattr(importlib.import_module(f"transformers.models.{mod}"), cls_name)(cfg)
    else:
        model = getattr(transformers, cls_name)(cfg)
    return _Wrap(model, field, **({"use_cache": False} if hasattr(cfg, "use_cache") else {}))


def _ids(n: int, vocab: int = 256) -> Tuple[torch.Tensor]:
    return (torch.randint(0, vocab, (1, n)),)


def _llama_like(config_name: str, cls_name: str, hidden: int, layers: int, heads: int, kv: int,
                inter: int, vocab: int = 256, **extra):
    return _hf(cls_name, config_name, "logits", hidden_size=hidden, num_hidden_layers=layers,
               num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=inter,
               vocab_size=vocab, max_position_embeddings=256, **extra)


MODELS: Dict[str, Callable[[], Tuple[nn.Module, tuple]]] = {
    "cnn_bn_residual": lambda: (CNN(), (torch.randn(1, 3, 32, 32),)),
    "lstm": lambda: (RNN("lstm"), (torch.randn(1, 16, 32),)),
    "gru": lambda: (RNN("gru"), (torch.randn(1, 16, 32),)),
    "unet": lambda: (UNet(), (torch.randn(1, 3, 32, 32),)),
    "bert": lambda: (_hf("BertModel", "BertConfig", hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=128, vocab_size=256), _ids(16)),
    "gpt2": lambda: (_hf("GPT2LMHeadModel", "GPT2Config", "logits", n_embd=64, n_layer=2, n_head=4,
                         vocab_size=256, n_positions=64), _ids(16)),
    "llama": lambda: (_llama_like("LlamaConfig", "LlamaForCausalLM", 64, 2, 4, 2, 128), _ids(16)),
    "qwen2": lambda: (_llama_like("Qwen2Config", "Qwen2ForCausalLM", 64, 2, 4, 2, 128), _ids(16)),
    "vit": lambda: (_hf("ViTModel", "ViTConfig", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, image_size=32, patch_size=8), (torch.randn(1, 3, 32, 32),)),
    "whisper_encoder": lambda: (_hf("whisper.modeling_whisper.WhisperEncoder", "WhisperConfig", d_model=64,
                                    encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                                    num_mel_bins=16, max_source_positions=32), (torch.randn(1, 16, 64),)),
    "t5_encoder": lambda: (_hf("T5EncoderModel", "T5Config", d_model=64, d_kv=16, d_ff=128, num_layers=2,
                               num_heads=4, vocab_size=256), _ids(16)),
    "kv_decoder": lambda: (KVDecoder(), (torch.randint(0, 128, (1, 4)), torch.arange(4))),
    "llama_50m": lambda: (_llama_like("LlamaConfig", "LlamaForCausalLM", 512, 8, 8, 4, 1408, vocab=8192),
                          _ids(64, 8192)),
}


class Map(nn.Module):
    """torch's map over the first dimension: ExecuTorch emits a loop (a copy by index,
    the body, a jump back)."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, xs):
        from torch._higher_order_ops.map import map as map_over
        return map_over(lambda x: self.lin(x).relu() * 2, xs) + 1


# Not benched: for the tests only.
EXTRA: Dict[str, Callable[[], Tuple[nn.Module, tuple]]] = {
    "cond": lambda: (Cond(), (torch.randn(4, 16),)),
    "map": lambda: (Map(), (torch.randn(3, 4, 8),)),
}

# Held out: never looked at while emel's ExecuTorch planner was built;
# `bench/executorch_planners.py --held-out` plans them.
HELD_OUT: Dict[str, Callable[[], Tuple[nn.Module, tuple]]] = {
    "mistral": lambda: (_llama_like("MistralConfig", "MistralForCausalLM", 64, 2, 4, 2, 160), _ids(24)),
    "phi3": lambda: (_llama_like("Phi3Config", "Phi3ForCausalLM", 64, 2, 4, 4, 128, pad_token_id=0), _ids(12)),
    "gemma": lambda: (_hf("GemmaForCausalLM", "GemmaConfig", "logits", hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=1, head_dim=16, intermediate_size=128,
                          vocab_size=256), _ids(20)),
    "distilbert": lambda: (_hf("DistilBertModel", "DistilBertConfig", dim=64, n_layers=3, n_heads=4,
                               hidden_dim=96, vocab_size=256), _ids(18)),
    "roberta": lambda: (_hf("RobertaModel", "RobertaConfig", hidden_size=48, num_hidden_layers=3,
                            num_attention_heads=3, intermediate_size=144, vocab_size=256), _ids(10)),
    "mobilenet_v2": lambda: (_hf("MobileNetV2Model", "MobileNetV2Config", "pooler_output", image_size=32,
                                 depth_multiplier=0.35), (torch.randn(1, 3, 32, 32),)),
    "convnext": lambda: (_hf("ConvNextModel", "ConvNextConfig", "pooler_output", hidden_sizes=[16, 32, 48, 64],
                             depths=[1, 1, 2, 1], image_size=32), (torch.randn(1, 3, 32, 32),)),
    "torch_transformer": lambda: (nn.TransformerEncoder(nn.TransformerEncoderLayer(48, 4, 96, batch_first=True),
                                                        3), (torch.randn(2, 12, 48),)),
    "mlp_mixer_like": lambda: (nn.Sequential(nn.Linear(40, 160), nn.GELU(), nn.LayerNorm(160), nn.Linear(160, 40),
                                             nn.Sigmoid(), nn.Linear(40, 300), nn.Tanh(), nn.Linear(300, 7)),
                               (torch.randn(16, 40),)),
}


def build(name: str):
    torch.manual_seed(0)
    module, inputs = {**MODELS, **EXTRA, **HELD_OUT}[name]()
    return module.eval(), inputs


def lower(name: str):
    """The model's edge program (``to_edge`` of ``torch.export``) and its inputs."""
    from executorch.exir import to_edge
    module, inputs = build(name)
    with torch.no_grad():
        ep = torch.export.export(module, inputs, strict=False)
    return to_edge(ep), inputs


def to_program(edge, memory_planning_pass=None):
    """``to_executorch`` on a deep copy (it mutates the edge program), default pass when None."""
    from executorch.exir import ExecutorchBackendConfig
    config = ExecutorchBackendConfig() if memory_planning_pass is None else \
        ExecutorchBackendConfig(memory_planning_pass=memory_planning_pass)
    return copy.deepcopy(edge).to_executorch(config)


def planned_bytes(program) -> int:
    """Bytes of every planned (non-constant) buffer of the program's methods."""
    return sum(sum(plan.non_const_buffer_sizes) for plan in program.executorch_program.execution_plan)


def run(program, inputs, steps: int = 1):
    """Outputs of ``forward`` in executorch.runtime, ``steps`` calls in a row (state carries over)."""
    from executorch.runtime import Runtime
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    outs = []
    for _ in range(steps):
        outs.append([o.clone() for o in method.execute(list(inputs))])
    return outs
