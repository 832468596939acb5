"""Seeded synthetic static-allocation traces for bench/peers.py.

Each generator returns ``(lower, upper, size)``: int64 arrays of exactly ``n``
rows, buffers live over the half-open ``[lower, upper)`` (``lower < upper``,
``size >= 1``). The same ``(n, seed)`` gives the same arrays on every machine
(NumPy's PCG64 through ``np.random.default_rng``).

- ``transformer``: training steps of a layered, transformer-like model. Each
  step runs ``layers`` layers forward, then backward in reverse. Per layer,
  eight forward ops each produce an activation (a few size classes: hidden
  ``h``, ``3h`` for q/k/v, ``4h`` for the MLP, ``a`` for attention scores);
  about half of them are saved for the backward pass (live until the mirrored
  backward op), the rest die after the next op; the layer's residual-stream
  output is always saved (long-lived). The backward pass makes one gradient
  per op (same size as its activation, live for 2-3 steps). Micro-batch steps
  repeat until ``n`` buffers exist, so the live set stays bounded (about one
  step's saved activations) however large ``n`` is.
- ``uniform``: independent uniformly random rows: ``lower`` in
  ``[0, n)``, length in ``[1, 200]``, size in ``[1, 2^20]`` bytes.

Dense families (thousands of buffers live at every instant, where a greedy
pass meets most other buffers; docs/strategies.md §2):

- ``near_clique``: 95% of the rows live over the middle instant ``n // 2``
  (``lower`` in ``[0, n/2]``, ``upper`` in ``(n/2, n]``), the rest short
  (1-20 steps) anywhere; sizes in ``[1, 2^20]``.
- ``clusters``: eight near-cliques one after the other, each over its own
  eighth of the time line.
- ``long_step``: one long training step of the ``transformer`` family
  (``n / 16`` layers): every saved activation lives from its forward op to
  its backward op.
- ``uniform_long``: ``uniform`` with lifetimes up to 2,000 steps.
- ``bursty``: starts bunched around 50 random instants (normal, sd 300
  steps), lifetimes up to 2,000 steps, sizes in ``[1, 2^20]``; seeded with
  ``np.random.default_rng(seed)`` as the held-out loops of
  docs/benchmarks.md ("A run with few passes left") drew it.
- ``lognormal``: random starts in ``[0, n)``, lifetimes up to 2,000 steps,
  log-normal sizes (``exp(N(10, 2))`` bytes, at most 2^34): a few huge
  buffers among many small ones; seeded with ``np.random.default_rng(seed)``
  as those loops drew it.

    python bench/synthetic_traces.py transformer 10000 --seed 0 -o t.csv
"""

from __future__ import annotations

import argparse

import numpy as np

FAMILIES = ("transformer", "uniform")  # bench/peers.py's default
DENSE_FAMILIES = ("near_clique", "clusters", "long_step", "uniform_long")
ALL_FAMILIES = FAMILIES + DENSE_FAMILIES + ("bursty", "lognormal")

OPS = 8                 # forward ops (activations) per layer
LAYERS = 24             # layers per training step
# Size class of op j's activation (and of its gradient), in units chosen per trace.
_OP_CLASS = np.array([0, 1, 2, 2, 0, 3, 0, 0])   # h, 3h (qkv), a (scores), a (probs), h, 4h (mlp), h, h


def transformer(n: int, seed: int = 0, layers: int = LAYERS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A layered transformer-like training trace of ``n`` buffers (see the module docstring)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = np.random.default_rng([seed, 1])
    per_layer = 2 * OPS                     # OPS activations + OPS gradients
    per_step = layers * per_layer
    steps = max(1, -(-n // per_step))
    # A few size classes; dims per trace from the seed (bytes, fp16).
    seq = int(rng.choice([128, 256, 512]))
    d = int(rng.choice([256, 512, 768, 1024]))
    heads = int(rng.choice([4, 8, 12]))
    h = seq * d * 2
    classes = np.array([h, 3 * h, heads * seq * seq * 2, 4 * h], dtype=np.int64)

    # Grids of shape (steps, layers, OPS): step s, layer l, op j.
    s, l, j = np.meshgrid(np.arange(steps), np.arange(layers), np.arange(OPS), indexing="ij")
    span = 2 * layers * OPS + 4                     # time steps of one training step
    t_fwd = s * span + l * OPS + j                  # forward op time
    t_bwd = s * span + 2 * layers * OPS - 1 - (l * OPS + j)   # mirrored backward op time
    act_size = classes[_OP_CLASS[j]]
    # Saved activations (about half, and always the residual output j == OPS-1) live until their
    # backward op; the others die after the next op reads them.
    saved = (rng.random(j.shape) < 0.5) | (j == OPS - 1)
    act_upper = np.where(saved, t_bwd + 1, t_fwd + 2)
    grad_upper = t_bwd + 1 + rng.integers(1, 3, size=j.shape)
    # Rows in (step, layer, activations then gradients, op) order; the first n.
    lower = np.stack([t_fwd, t_bwd], axis=2).ravel()[:n]
    upper = np.stack([act_upper, grad_upper], axis=2).ravel()[:n]
    size = np.stack([act_size, act_size], axis=2).ravel()[:n]
    return (np.ascontiguousarray(lower, np.int64), np.ascontiguousarray(upper, np.int64),
            np.ascontiguousarray(size, np.int64))


def uniform(n: int, seed: int = 0, max_len: int = 200,
            max_size: int = 1 << 20) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` uniformly random buffers (see the module docstring)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = np.random.default_rng([seed, 2])
    lower = rng.integers(0, max(n, 1), size=n, dtype=np.int64)
    upper = lower + rng.integers(1, max_len + 1, size=n, dtype=np.int64)
    size = rng.integers(1, max_size + 1, size=n, dtype=np.int64)
    return lower, upper, size


def near_clique(n: int, seed: int = 0, clusters: int = 1,
                max_size: int = 1 << 20) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``clusters`` near-cliques in turn over ``n`` steps (see the module docstring)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = np.random.default_rng([seed, 3, clusters])
    span = max(2, n // clusters)                    # steps per cluster
    which = rng.integers(0, clusters, size=n, dtype=np.int64)
    start = which * span
    middle = start + span // 2
    in_clique = rng.random(n) < 0.95
    lower = np.where(in_clique, start + rng.integers(0, span // 2 + 1, size=n), start + rng.integers(0, span, size=n))
    upper = np.where(in_clique, middle + 1 + rng.integers(0, span - span // 2, size=n),
                     lower + rng.integers(1, 21, size=n))
    size = rng.integers(1, max_size + 1, size=n, dtype=np.int64)
    return lower.astype(np.int64), upper.astype(np.int64), size


def bursty(n: int, seed: int = 0, centers: int = 50, spread: int = 300,
           max_len: int = 2000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` buffers whose starts bunch around ``centers`` instants (see the module docstring)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = np.random.default_rng(seed)
    middle = rng.integers(0, max(n, 1), centers)
    lower = np.clip(middle[rng.integers(0, centers, n)] + rng.normal(0, spread, n).astype(np.int64), 0, None)
    upper = lower + rng.integers(1, max_len, n)
    size = rng.integers(1, 1 << 20, n)
    return lower.astype(np.int64), upper.astype(np.int64), size.astype(np.int64)


def lognormal(n: int, seed: int = 0, max_len: int = 2000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` buffers with random starts and lifetimes (up to ``max_len`` steps) and heavy-tailed
    sizes (see the module docstring)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = np.random.default_rng(seed)
    lower = rng.integers(0, max(n, 1), n)
    upper = lower + rng.integers(1, max_len, n)
    size = np.minimum(np.exp(rng.normal(10, 2, n)).astype(np.int64) + 1, 1 << 34)
    return lower.astype(np.int64), upper.astype(np.int64), size.astype(np.int64)


def generate(family: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if family == "transformer":
        return transformer(n, seed)
    if family == "uniform":
        return uniform(n, seed)
    if family == "near_clique":
        return near_clique(n, seed)
    if family == "clusters":
        return near_clique(n, seed, clusters=8)
    if family == "long_step":
        return transformer(n, seed, layers=max(1, n // (2 * OPS)))
    if family == "uniform_long":
        return uniform(n, seed, max_len=2000)
    if family == "bursty":
        return bursty(n, seed)
    if family == "lognormal":
        return lognormal(n, seed)
    raise ValueError(f"unknown family {family!r}; choose from {', '.join(ALL_FAMILIES)}")


def write_csv(path, lower, upper, size) -> None:
    """The ``id,lower,upper,size`` form of the MiniMalloc / idealloc benchmarks."""
    table = np.stack([np.arange(len(size)), lower, upper, size], axis=1)
    np.savetxt(path, table, fmt="%d", delimiter=",", header="id,lower,upper,size", comments="")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", choices=ALL_FAMILIES)
    ap.add_argument("n", type=lambda v: int(float(v)), help="buffers (1e4 works)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", required=True, help="CSV to write")
    args = ap.parse_args(argv)
    write_csv(args.output, *generate(args.family, args.n, args.seed))


if __name__ == "__main__":
    main()
