"""Example graphs bundled with emel.memory (real models, `emel.graph/1`).

- ``llama-tiny-inference``: a 4-layer Llama-style decoder (RMSNorm, RoPE,
  SwiGLU, GQA), batch 1, 256 tokens — the default example.
- ``llama-tiny-training``: the same decoder's training step (forward and
  backward, batch 2): plan it with ``mode="backward"``.
- ``resnet18-inference``: ResNet-18, batch 1, 224x224.
"""

from __future__ import annotations

from importlib import resources

DEFAULT = "llama-tiny-inference"


def names() -> list[str]:
    """The bundled example names."""
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir()
                  if p.name.endswith(".json"))


def path(name: str = DEFAULT):
    """A readable path-like object for a bundled example."""
    candidate = resources.files(__name__) / f"{name}.json"
    if not candidate.is_file():
        raise KeyError(f"no bundled example {name!r}; available: {', '.join(names())}")
    return candidate


def load(name: str = DEFAULT):
    """The example as a Graph."""
    from ..graph import Graph
    import json
    return Graph.from_dict(json.loads(path(name).read_text(encoding="utf-8")))
