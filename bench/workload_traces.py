"""Seeded traces of real-workload shapes, at any number of buffers (issue 32).

Each generator returns ``(lower, upper, size)``: int64 arrays of exactly ``n``
rows, buffers live over the half-open ``[lower, upper)`` (``lower < upper``,
``size >= 1``). Rows come out in time order of their start, and the first ``n``
are kept. The same ``(n, seed)`` gives the same arrays on every machine
(NumPy's PCG64 through ``np.random.default_rng``).

- ``pipeline_1f1b``: one stage of pipeline-parallel training under the 1F1B
  schedule (Megatron's: ``stages - stage - 1`` warm-up forwards, then one
  forward and one backward in turn, then the cool-down backwards), for
  several iterations. Each forward and backward runs the stage's layers one
  step each. A micro-batch's saved activations live from its layer's forward
  step to the same layer's backward step; the backward makes input gradients
  (live two steps) and weight-gradient temporaries (one step); each layer's
  gradient accumulator lives from the iteration's first backward to its
  optimizer step. With ``flush=True`` (the default) each iteration ends in the
  pipeline flush and the optimizer step, so nothing lives from one iteration
  into the next: the trace falls apart at those instants. With
  ``flush=False`` micro-batches stream without end (one iteration that never
  flushes): a single chained trace. Each iteration's micro-batches have a
  token count from a few buckets (sequence-length bucketing), so some
  iterations repeat and others do not.
- ``paged_kv``: LLM decoding with a paged KV cache and continuous batching.
  Requests arrive at random, wait for a free place in a batch of at most
  ``max_batch`` sequences, take the pages of their prompt (all pages one size:
  16 tokens of every layer's keys and values) at admission, one more page
  every 16 decoded tokens, and free them all when they finish. Every step has
  the decode batch's activations and logits (live one step, sizes following
  the batch), and each admission its prefill activations.
- ``kv_realloc``: LLM decoding whose KV cache is one buffer per sequence, grown
  by reallocation (no pages): each step every sequence of a batch of
  ``sequences`` takes a buffer one or two 4 KiB blocks larger than its last,
  both live for that step (the copy), and a request that finishes (1% a step)
  is replaced by one with a new prompt; each step also has one activation.
  Few conflicts per buffer: a greedy pass is cheap, so ``auto`` at the
  default makes over a thousand of them (docs/strategies.md §2).

    python bench/workload_traces.py pipeline_1f1b 21504 --seed 0 -o t.csv
"""

from __future__ import annotations

import argparse

import numpy as np

FAMILIES = ("pipeline_1f1b", "paged_kv", "kv_realloc")


def _arrays(lower, upper, size, n):
    return (np.array(lower[:n], np.int64), np.array(upper[:n], np.int64), np.array(size[:n], np.int64))


def _one_f_one_b(stages: int, stage: int, micro_batches: int) -> list[tuple[str, int]]:
    """The 1F1B order of a stage's ops: ('F' or 'B', micro-batch)."""
    warmup = min(stages - stage - 1, micro_batches)
    ops = [("F", m) for m in range(warmup)]
    for i in range(micro_batches - warmup):
        ops += [("F", warmup + i), ("B", i)]
    ops += [("B", m) for m in range(micro_batches - warmup, micro_batches)]
    return ops


def pipeline_1f1b(n: int, seed: int = 0, flush: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pipeline-parallel 1F1B training, one stage's buffers (see the module docstring)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = np.random.default_rng([seed, 33])
    stages = int(rng.choice([4, 8]))
    stage = int(rng.integers(0, stages - 1))          # a stage with a warm-up
    micro_batches = int(rng.integers(2, 5)) * stages
    layers = int(rng.integers(2, 7))
    d = int(rng.choice([512, 1024, 2048]))
    buckets = [int(t) for t in rng.choice([256, 512, 1024, 2048], size=3, replace=False)]
    # Per layer: saved activations as multiples of tokens x d x 2 bytes (fp16): the input, q/k/v,
    # the attention output, the MLP's up projection and its activation.
    # Per layer (layers differ: widths, attention or MLP blocks, experts): the saved activations and
    # the forward's temporaries as fractions of tokens x d x 2 bytes (fp16), fixed for the trace.
    saved = [[float(f) for f in rng.choice([0.25, 0.5, 1, 1.5, 2, 3, 4], size=int(rng.integers(2, 6)))]
             for _ in range(layers)]
    temps = [[float(f) for f in rng.uniform(0.1, 4, size=int(rng.integers(1, 4)))] for _ in range(layers)]
    weight = 12 * d * d * 2 // stages                   # a layer's weights (sharded), for its gradients
    lower, upper, size = [], [], []
    t = 0
    while len(size) < n:
        tokens = buckets[int(rng.integers(0, len(buckets)))]
        h = tokens * d * 2
        ops = _one_f_one_b(stages, stage, micro_batches if flush else max(1, -(-n // (layers * 10))))
        fwd_at, bwd_at = {}, {}
        for k, (kind, m) in enumerate(ops):
            (fwd_at if kind == "F" else bwd_at)[m] = t + k * layers
        end = t + len(ops) * layers                       # the optimizer step
        first_bwd = min(bwd_at.values())
        rows = []
        for layer in range(layers):                       # gradient accumulators: the iteration's backwards
            rows.append((first_bwd, end + 1, 2 * weight))
        for kind, m in ops:
            for layer in range(layers):
                if kind == "F":
                    s = fwd_at[m] + layer
                    b = bwd_at[m] + (layers - 1 - layer)
                    for f in saved[layer]:
                        rows.append((s, b + 1, int(f * h) // 256 * 256 + 256))
                    for f in temps[layer]:                # workspaces (attention scores, dropout masks)
                        rows.append((s, s + 1, int(f * h) // 256 * 256 + 256))
                else:
                    s = bwd_at[m] + (layers - 1 - layer)
                    rows.append((s, s + 2, h))            # the input gradient, read by the next layer down
                    for f in saved[layer]:                # the saved activations' gradients
                        rows.append((s, s + 1, int(f * h) // 256 * 256 + 256))
                    rows.append((s, s + 1, weight))       # this micro-batch's weight gradient, accumulated
        for layer in range(layers):                       # the optimizer's workspace, one layer at a time
            rows.append((end, end + 1, 2 * weight))
        rows.sort()
        for r in rows:
            lower.append(r[0]), upper.append(r[1]), size.append(r[2])
        t = end + 2
    return _arrays(lower, upper, size, n)


def paged_kv(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Paged-KV-cache decoding with continuous batching (see the module docstring)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = np.random.default_rng([seed, 32])
    page_tokens = 16
    layers = int(rng.choice([16, 24, 32]))
    kv_heads = int(rng.choice([4, 8]))
    head_dim = 128
    page = page_tokens * layers * 2 * kv_heads * head_dim * 2          # K and V, fp16
    hidden = int(rng.choice([2048, 4096]))
    vocab = int(rng.choice([32000, 50304, 128256]))
    max_batch = int(rng.choice([8, 16, 32]))
    mean_prompt, mean_output = int(rng.integers(64, 512)), int(rng.integers(32, 256))
    rate = 1.1 * max_batch / mean_output                              # arrivals a step: keeps the batch full
    lower, upper, size = [], [], []
    waiting: list[tuple[int, int]] = []                               # (prompt, output) tokens
    running: list[list] = []                                          # [tokens so far, tokens left, page rows]
    t = 0
    while len(size) < n:
        for _ in range(int(rng.poisson(rate))):
            waiting.append((int(rng.integers(8, 2 * mean_prompt)), int(rng.integers(1, 2 * mean_output))))
        while waiting and len(running) < max_batch:                   # admission: prefill
            prompt, output = waiting.pop(0)
            pages = []
            for _ in range(-(-prompt // page_tokens)):
                pages.append(len(size))
                lower.append(t), upper.append(t), size.append(page)
            for k in (1, 3, 4):                                       # prefill activations
                lower.append(t), upper.append(t + 1), size.append(k * prompt * hidden * 2)
            running.append([prompt, output, pages])
        if running:                                                   # one decode step of the batch
            batch = len(running)
            for k in (1, 3, 4):
                lower.append(t), upper.append(t + 1), size.append(k * batch * hidden * 2)
            lower.append(t), upper.append(t + 1), size.append(batch * vocab * 4)
            still = []
            for seq in running:
                if seq[0] % page_tokens == 0:                         # the last page is full: a new one
                    seq[2].append(len(size))
                    lower.append(t), upper.append(t), size.append(page)
                seq[0] += 1
                seq[1] -= 1
                if seq[1] == 0:
                    for r in seq[2]:
                        upper[r] = t + 1                              # freed after its last step
                else:
                    still.append(seq)
            running = still
        t += 1
    for seq in running:                                               # still decoding at the end
        for r in seq[2]:
            upper[r] = t
    return _arrays(lower, upper, size, n)


def kv_realloc(n: int, seed: int = 0, sequences: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decoding with a KV cache grown by reallocation (see the module docstring)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = np.random.default_rng([seed, 7])
    block = 4096
    kv = [int(rng.integers(1, 64)) * block for _ in range(sequences)]
    lower: list[int] = []
    upper: list[int] = []
    size: list[int] = []
    step = 0
    while len(size) < n:
        for s in range(sequences):
            kv[s] += block * int(rng.integers(1, 3))
            lower.append(step)
            upper.append(step + 2)          # the old buffer dies after the next step's copy
            size.append(kv[s])
            if rng.random() < 0.01:         # finished: a new request, a new prompt
                kv[s] = int(rng.integers(1, 64)) * block
        lower.append(step)
        upper.append(step + 1)              # the step's activation
        size.append(int(rng.integers(1, 100)) * 1024)
        step += 1
    return _arrays(lower, upper, size, n)


def generate(family: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if family == "pipeline_1f1b":
        return pipeline_1f1b(n, seed)
    if family == "pipeline_1f1b_noflush":
        return pipeline_1f1b(n, seed, flush=False)
    if family == "paged_kv":
        return paged_kv(n, seed)
    if family == "kv_realloc":
        return kv_realloc(n, seed)
    raise ValueError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}, pipeline_1f1b_noflush")


def main(argv=None):
    import synthetic_traces

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", choices=FAMILIES + ("pipeline_1f1b_noflush",))
    ap.add_argument("n", type=lambda v: int(float(v)), help="buffers (1e4 works)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", required=True, help="CSV to write")
    args = ap.parse_args(argv)
    synthetic_traces.write_csv(args.output, *generate(args.family, args.n, args.seed))


if __name__ == "__main__":
    main()
