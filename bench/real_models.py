"""Real model families through the importers: the table of docs/importers.md.

For each model (torchvision-shaped CNNs and a ViT written here, Hugging Face
models built from small configs with random weights, no downloads, and ONNX
exports made here), in inference and training: import time, tensors and
nodes, the `auto` plan against its lower bound, and the execution check (the
plan in real memory, every tensor's bytes checked after every step). For
three of them, the `--why` answer (Plan.peak) and a `max_fit` answer over the
batch size, checked by planning the answer and the next value.

    HF_HUB_OFFLINE=1 python bench/real_models.py [--only NAME,...] [--no-onnx] [--out FILE]

Needs transformers, and onnxscript for the ONNX exports (torch.onnx's dynamo
exporter); --no-onnx without it.

torchvision itself is not used: no CPU build of torchvision imports against
the pinned torch 2.13.0+cpu here (docs/importers.md#installing-a-cpu-torch);
the vision models are written out in torchvision's shapes instead.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import emel.memory as mm  # noqa: E402
from emel.memory.graph import tensor_bytes  # noqa: E402
from _common import print_table, write_json  # noqa: E402


# -- torchvision-shaped models --------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                         nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else None)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    """torchvision.models.resnet18's layout (basic blocks 2-2-2-2)."""

    def __init__(self, classes=1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths, cin, layers = (64, 128, 256, 512), 64, []
        for k, w in enumerate(widths):
            layers.append(nn.Sequential(BasicBlock(cin, w, 1 if k == 0 else 2), BasicBlock(w, w, 1)))
            cin = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(512, classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.conv = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision.models.mobilenet_v2's inverted-residual settings."""

    def __init__(self, classes=1000):
        super().__init__()
        settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                    (6, 160, 3, 2), (6, 320, 1, 1)]
        layers, cin = [nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                                     nn.ReLU6(inplace=True))], 32
        for t, c, n, s in settings:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(nn.Sequential(nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280),
                                    nn.ReLU6(inplace=True)))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class VGG11(nn.Module):
    """torchvision.models.vgg11's configuration 'A' (narrowed 4x)."""

    def __init__(self, classes=1000):
        super().__init__()
        layers, cin = [], 3
        for v in (16, "M", 32, "M", 64, 64, "M", 128, 128, "M", 128, 128, "M"):
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
                cin = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(128 * 2 * 2, 512), nn.ReLU(True),
                                        nn.Linear(512, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class ViT(nn.Module):
    """torchvision.models.vit_b_16's structure at a tiny width (patch 8, 2 layers)."""

    def __init__(self, image=64, patch=8, dim=64, classes=1000):
        super().__init__()
        self.conv_proj = nn.Conv2d(3, dim, patch, patch)
        tokens = (image // patch) ** 2 + 1
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.zeros(1, tokens, dim))
        layer = nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.0, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.heads = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embedding
        return self.heads(self.encoder(x)[:, 0])


def vision(name, cls):
    return name, lambda device="cpu": _on(device, cls), \
        lambda batch, device="cpu": ((torch.randn(batch, 3, 64, 64, device=device),), None)


def _on(device, make):
    with torch.device(device):
        return make().eval()


# -- Hugging Face models from configs ---------------------------------------------
def hf(name, config_name, model_name, vocab=512, seq=32, feed=None, **cfg):
    """A Hugging Face model from a small config; ``feed(batch, device)`` gives
    its keyword inputs when they are not token ids (audio, images)."""
    import transformers as t

    def make(device="cpu"):
        config = getattr(t, config_name)(**cfg)
        return _on(device, lambda: getattr(t, model_name)(config))

    def inputs(batch, device="cpu"):
        if feed is not None:
            return (), feed(batch, device)
        ids = torch.randint(0, vocab, (batch, seq), device=device)
        kw = {"input_ids": ids}
        if model_name.startswith(("T5", "Bart")):
            kw["decoder_input_ids"] = ids[:, : seq // 2]
        return (), kw
    return name, make, inputs


class Handwritten(nn.Module):
    """A GRU, einsum, top-k, scatter and in-place chains: ops the HF models lack."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 64)
        self.gru = nn.GRU(64, 64, batch_first=True)
        self.mix = nn.Parameter(torch.randn(64, 64) / 8)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        h, _ = self.gru(torch.relu_(self.embed(x)))
        h = torch.einsum("btd,de->bte", h, self.mix)
        top, idx = h.topk(8, dim=-1)
        z = torch.zeros_like(h).scatter(-1, idx, top)
        z.mul_(0.5).add_(h)
        return self.head(z.mean(1))


def handwritten(name):
    return name, lambda device="cpu": _on(device, Handwritten), \
        lambda batch, device="cpu": ((torch.randn(batch, 12, 16, device=device),), None)


def models():
    small = dict(num_hidden_layers=2, num_attention_heads=4)
    return [
        vision("resnet18 (tv shape)", ResNet18),
        vision("mobilenet_v2 (tv shape)", MobileNetV2),
        vision("vgg11/4 (tv shape)", VGG11),
        vision("vit tiny (tv shape)", ViT),
        hf("gpt2", "GPT2Config", "GPT2LMHeadModel", vocab_size=512, n_embd=64, n_layer=2, n_head=4,
           bos_token_id=0, eos_token_id=0,
           n_positions=64),
        hf("bert", "BertConfig", "BertForMaskedLM", vocab_size=512, hidden_size=64,
           intermediate_size=128, **small),
        hf("distilbert", "DistilBertConfig", "DistilBertForMaskedLM", vocab_size=512, dim=64,
           hidden_dim=128, n_layers=2, n_heads=4),
        hf("llama", "LlamaConfig", "LlamaForCausalLM", vocab_size=512, hidden_size=64,
           intermediate_size=128, num_key_value_heads=2, max_position_embeddings=64, **small),
        hf("mistral", "MistralConfig", "MistralForCausalLM", vocab_size=512, hidden_size=64,
           intermediate_size=128, num_key_value_heads=2, max_position_embeddings=64, **small),
        hf("qwen2", "Qwen2Config", "Qwen2ForCausalLM", vocab_size=512, hidden_size=64,
           intermediate_size=128, num_key_value_heads=2, max_position_embeddings=64, **small),
        hf("opt", "OPTConfig", "OPTForCausalLM", vocab_size=512, hidden_size=64, ffn_dim=128,
           word_embed_proj_dim=64, max_position_embeddings=64, **small),
        hf("t5", "T5Config", "T5ForConditionalGeneration", vocab_size=512, d_model=64, d_kv=16,
           d_ff=128, num_layers=2, num_heads=4),
    ] + unseen_models()


def unseen_models():
    """Families the importer was not written against (issue 29's new-user trial)."""
    small = dict(num_hidden_layers=2, num_attention_heads=4)
    image = lambda batch, device: {  # noqa: E731
        "pixel_values": torch.randn(batch, 3, 32, 32, device=device)}
    return [
        hf("phi3", "Phi3Config", "Phi3ForCausalLM", vocab_size=512, hidden_size=64,
           intermediate_size=128, num_key_value_heads=2, max_position_embeddings=64,
           pad_token_id=0, **small),
        hf("gemma", "GemmaConfig", "GemmaForCausalLM", vocab_size=512, hidden_size=64,
           intermediate_size=128, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
           **small),
        hf("falcon", "FalconConfig", "FalconForCausalLM", vocab_size=512, hidden_size=64,
           **small),
        hf("bloom", "BloomConfig", "BloomForCausalLM", vocab_size=512, hidden_size=64, n_layer=2,
           n_head=4),
        hf("bart", "BartConfig", "BartForConditionalGeneration", vocab_size=512, d_model=64,
           encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
           max_position_embeddings=64),
        hf("wav2vec2", "Wav2Vec2Config", "Wav2Vec2Model", hidden_size=64, intermediate_size=128,
           conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3), num_feat_extract_layers=2,
           num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, layerdrop=0.0,
           mask_time_prob=0.0,  # train-time masking picks positions by value: off for planning
           feed=lambda batch, device: {"input_values": torch.randn(batch, 1600, device=device)},
           **small),
        hf("swin", "SwinConfig", "SwinForImageClassification", image_size=32, patch_size=4,
           embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4, feed=image),
        hf("clip", "CLIPConfig", "CLIPModel",
           text_config=dict(vocab_size=512, hidden_size=64, intermediate_size=128, **small,
                            max_position_embeddings=32),
           vision_config=dict(image_size=32, patch_size=8, hidden_size=64, intermediate_size=128,
                              **small),
           feed=lambda batch, device: {"input_ids": torch.randint(0, 512, (batch, 16), device=device),
                                       "pixel_values": torch.randn(batch, 3, 32, 32, device=device)}),
        handwritten("handwritten-rnn"),   # a GRU, einsum, top-k, scatter, in-place chains
    ]


def measure(name, make, inputs, training, batch=2):
    """Inference, or a training step with Adam (its state checked against a real step)."""
    torch.manual_seed(0)
    model = make()
    args, kwargs = inputs(batch)
    optimizer = torch.optim.Adam(model.parameters()) if training else None
    start = time.perf_counter()
    graph = mm.from_torch(model, args, training=training, kwargs=kwargs, optimizer=optimizer,
                          name=f"{name}-{'training' if training else 'inference'}")
    seconds = time.perf_counter() - start
    row = row_of(name, "training + adam" if training else "inference", graph, seconds,
                 "backward" if training else "inference")
    if training:
        row["adam_state_bytes"] = sum(tensor_bytes(t) for t in graph.tensors
                                      if t["role"] == "optimizer_state")
        row["real_adam_bytes"] = real_adam_state(model, args, kwargs, optimizer)
    return row


def real_adam_state(model, args, kwargs, optimizer) -> int:
    """The bytes Adam holds after one real step of the same model and inputs."""
    model.train()
    out = model(*args, **(kwargs or {}))
    loss = sum(x.float().sum() for x in torch.utils._pytree.tree_leaves(out)
               if isinstance(x, torch.Tensor) and x.is_floating_point())
    loss.backward()
    optimizer.step()
    return sum(v.numel() * v.element_size() for state in optimizer.state.values()
               for v in state.values() if isinstance(v, torch.Tensor))


def row_of(name, kind, graph, seconds, mode):
    default = mm.plan(graph, mode=mode)          # what a user gets with no options
    live = default.peak(top=0).live_bytes
    plan = mm.plan(graph, mode=mode, strategy="auto")
    movable = [a for a in plan.arenas.values() if not a.persistent]
    size, bound = sum(a.size for a in movable), sum(a.lower_bound for a in movable)
    check = "ok"
    try:
        mm.verify_execution(plan, plan.allocate())
    except mm.PlanError as e:
        check = e.code
    return {"model": name, "kind": kind, "import_s": seconds, "tensors": len(graph.tensors),
            "nodes": len(graph.nodes),
            "with_module": sum(1 for t in graph.tensors if t.get("module")) / len(graph.tensors),
            "auto_bytes": size, "bound_bytes": bound, "ratio": size / bound if bound else None,
            "default_total": default.total_bytes, "peak_live": live,
            "default_ratio": default.total_bytes / live if live else None,
            "execution_check": check}


def onnx_rows(tmp):
    """Three exports made here with torch.onnx (dynamo): a dynamic-batch Llama (shape
    arithmetic: Range), GPT-2, and the ResNet-18 shape; planned with fixed input shapes."""
    rows = []
    specs = [n for n in models() if n[0] in ("llama", "gpt2", "resnet18 (tv shape)")]
    for name, make, inputs in specs:
        args, kwargs = inputs(2)
        model = make()
        if kwargs:      # HF: input_ids only, without a cache
            model.config.use_cache = False
            args, names = (kwargs["input_ids"],), ["input_ids"]
        else:
            names = ["x"]
        batch = torch.export.Dim("batch", min=1, max=64)
        path = os.path.join(tmp, name.split()[0] + ".onnx")
        torch.onnx.export(model, args, path, input_names=names, dynamo=True,
                          dynamic_shapes=({0: batch},), verbose=False)
        fixed = {names[0]: list(args[0].shape)}
        start = time.perf_counter()
        graph = mm.from_onnx(path, input_shapes=fixed, name=f"{name}-onnx")
        rows.append(row_of(f"{name.split()[0]} (ONNX export)", "inference", graph,
                           time.perf_counter() - start, "inference"))
    return rows


def why_and_fit(name, make, inputs, training, budget_factor=3.0):
    """The --why answer at batch 2, and the largest batch whose plan fits
    budget_factor x the batch-1 plan, proven by planning it and the next batch."""
    mode = "backward" if training else "inference"

    def graph_at(batch):
        model = make("meta")
        args, kwargs = inputs(batch, "meta")
        return mm.from_torch(model, args, training=training, kwargs=kwargs)

    report = mm.plan(graph_at(2), mode=mode, strategy="auto").peak(top=3)
    one = mm.plan(graph_at(1), mode=mode, strategy="auto").total_bytes
    budget = int(one * budget_factor)
    fit = mm.max_fit(graph_at, budget, "batch", lo=1, hi=256, mode=mode, strategy="auto")
    # The check: plan the answer and the next value again, from scratch.
    fits = mm.plan(graph_at(fit.value), mode=mode, strategy="auto").total_bytes <= budget
    over = (fit.next_value is None or
            mm.plan(graph_at(fit.next_value), mode=mode, strategy="auto").total_bytes > budget)
    top = report.tensors[0]
    return {"model": name, "kind": "training" if training else "inference",
            "peak_bytes": report.live_bytes, "peak_step": report.step, "peak_node": report.node,
            "peak_module": report.module, "top_tensor": top.id, "top_module": top.module,
            "top_share": top.share, "breakdown": report.breakdown, "why": str(report),
            "budget": budget, "max_batch": fit.value, "bytes": fit.bytes,
            "next_batch": fit.next_value, "next_bytes": fit.next_bytes,
            "plans": len(fit.tried), "checked": bool(fits and over)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=None, help="comma-separated model names")
    p.add_argument("--no-onnx", action="store_true")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    chosen = models()
    if args.only:
        keep = set(args.only.split(","))
        chosen = [m for m in chosen if m[0] in keep]
    rows = []
    for name, make, inputs in chosen:
        for training in (False, True):
            rows.append(measure(name, make, inputs, training))
            print(f"  {rows[-1]['model']} {rows[-1]['kind']}: {rows[-1]['import_s']:.2f} s",
                  flush=True)
    if not args.no_onnx:
        with tempfile.TemporaryDirectory() as tmp:
            rows.extend(onnx_rows(tmp))
    columns = [("model", "model", ""), ("kind", "kind", ""), ("import_s", "import s", ".2f"),
               ("tensors", "tensors", "d"), ("with_module", "module", ".0%"),
               ("auto_bytes", "auto B", ","), ("bound_bytes", "bound B", ","),
               ("ratio", "auto/bound", ".3f"), ("default_ratio", "default total/peak", ".3f"),
               ("adam_state_bytes", "adam state B", ","), ("real_adam_bytes", "real adam B", ","),
               ("execution_check", "exec check", "")]
    print()
    print_table(rows, columns)
    answers = []
    by_name = {m[0]: m for m in models()}
    for name, training in (("llama", True), ("gpt2", False), ("resnet18 (tv shape)", True)):
        if name in by_name and (not args.only or name in args.only.split(",")):
            answers.append(why_and_fit(*by_name[name], training))
    for a in answers:
        print(f"\n{a['model']} {a['kind']}:\n{a['why']}")
        print(f"max_fit: batch {a['max_batch']} fits {a['budget']:,} B ({a['bytes']:,} B); batch "
              f"{a['next_batch']} needs {a['next_bytes']:,} B; {a['plans']} plans; re-checked: "
              f"{a['checked']}")
    write_json("real_models", {"rows": rows, "answers": answers}, args.out)


if __name__ == "__main__":
    main()
