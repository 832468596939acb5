"""emel-fit for GGUF models: the largest context (or ubatch) whose llama.cpp
buffers fit a memory budget, proven by the prediction at that value and at
the next one.

    emel-fit model.gguf --budget 8GiB --dim ctx [--ubatch 512] [--flash-attn on|off]
             [--kv-type f16] [--batch 2048] [--seq N [--kv-unified]] [--min N] [--max N] [--json OUT]
    emel-fit model.gguf --budget 8GiB --dim ubatch --ctx 4096 ...

The need is llama.cpp's total (weights + KV cache + output + compute, the
compute buffer as ggml-alloc reserves it). A context is searched in steps of
256, the granularity llama.cpp pads n_ctx to.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from ..bisection import largest_fitting
from ..errors import PlanError
from ..formats import fit_sentence, format_bytes
from . import KV_TYPES, GGUFPrediction, from_gguf, read_model

DIMS = {"ctx": "ctx", "n_ctx": "ctx", "context": "ctx", "ubatch": "ubatch", "n_ubatch": "ubatch"}
CTX_STEP = 256


@dataclass
class GGUFFit:
    dim: str
    budget: int
    compute: str                          # "ggml" (llama.cpp's compute buffer) or "auto" (emel's placement)
    value: int | None                     # None: not even the smallest value fits
    prediction: GGUFPrediction | None     # at value (fits)
    next_value: int | None                # the next value searched (does not fit); None: value is the maximum
    next_prediction: GGUFPrediction | None
    tried: dict = field(default_factory=dict)   # value -> total bytes

    def __str__(self) -> str:
        who = "llama.cpp" if self.compute == "ggml" else "with emel's auto placement of the compute buffer, it"
        needs = self.prediction.total_with(self.compute) if self.value is not None else None
        next_needs = self.next_prediction.total_with(self.compute) if self.next_value is not None else None
        return fit_sentence(self.dim, self.budget, self.value, needs, self.next_value, next_needs, who)

    def to_dict(self) -> dict:
        return {"dim": self.dim, "budget": self.budget, "compute": self.compute, "value": self.value,
                "next_value": self.next_value,
                "prediction": self.prediction.to_dict() if self.prediction else None,
                "next_prediction": self.next_prediction.to_dict() if self.next_prediction else None,
                "tried": {str(k): v for k, v in sorted(self.tried.items())}}


def fit_gguf(path, budget: int, dim: str, *, lo: int | None = None, hi: int | None = None,
             n_ctx: int = 0, n_ubatch: int = 512, compute: str = "ggml", on_probe=None, **config) -> GGUFFit:
    """The largest value of ``dim`` ("ctx" or "ubatch") whose predicted llama.cpp
    total fits ``budget`` bytes; ``config`` goes to from_gguf (flash_attn, kv_type, ...).
    ``compute="auto"`` counts the compute buffer as emel's `auto` placement needs it
    (what a runtime placing with emel would fit) instead of ggml-alloc's."""
    if compute not in ("ggml", "auto"):
        raise PlanError("INVALID_IR_SHAPES", f"{path}: compute must be 'ggml' or 'auto', got {compute!r}")
    if dim not in DIMS:
        raise PlanError("INVALID_IR_SHAPES", f"{path}: --dim {dim!r}: a GGUF model's dimensions are "
                                             f"ctx and ubatch")
    dim = DIMS[dim]
    info = read_model(path)
    config["auto"] = compute == "auto"   # the auto placement only where it is counted
    if dim == "ctx":
        step = CTX_STEP
        streams = 1 if config.get("kv_unified") else config.get("n_seq", 1)
        top = info.n_ctx_train * streams   # each sequence up to the trained context
        if config.get("allow_long_context"):
            top = max(top, hi or 0)
        lo_k = max(1, -(-(lo or step) // step))
        hi_k = (hi or top) // step
    else:
        step = 1
        ctx = n_ctx or info.n_ctx_train
        lo_k, hi_k = lo or 1, hi or min(ctx, config.get("n_batch", 2048))
    if lo_k > hi_k:
        raise PlanError("INVALID_IR_SHAPES", f"{path}: nothing to search: --min {lo_k * step} is above "
                                             f"--max {hi_k * step} for {dim}")
    made: dict = {}
    tried: dict = {}

    def make(k: int, **extra):
        return from_gguf(info, **_at(dim, k * step, n_ctx, n_ubatch), **dict(config, **extra))

    def fits(k: int) -> bool:
        if k not in made:
            made[k] = make(k)
            tried[k * step] = made[k].total_with(compute)
            if on_probe is not None:
                on_probe(k * step, tried[k * step])
        return tried[k * step] <= budget

    def result(good, bad) -> GGUFFit:
        return GGUFFit(dim=dim, budget=budget, compute=compute, value=None if good is None else good * step,
                       prediction=made.get(good), next_value=None if bad is None else bad * step,
                       next_prediction=made.get(bad), tried=tried)

    good, bad = largest_fitting(fits, lo_k, hi_k)
    # the proof's predictions with emel's auto placement beside them (already there under --compute auto)
    if good is not None and bad is not None and not config["auto"]:
        made[good], made[bad] = make(good, auto=True), make(bad, auto=True)
    return result(good, bad)


def _at(dim, value, n_ctx, n_ubatch) -> dict:
    return {"n_ctx": value, "n_ubatch": n_ubatch} if dim == "ctx" else {"n_ctx": n_ctx, "n_ubatch": value}


def add_gguf_options(p) -> None:
    """emel-fit's options for a model.gguf (ignored for other models)."""
    g = p.add_argument_group("GGUF models (model.gguf: the buffers llama.cpp will allocate)")
    g.add_argument("--ctx", type=int, default=0, metavar="N",
                   help="with --dim ubatch: the context (default: the model's trained context)")
    g.add_argument("--ubatch", type=int, default=512, metavar="N", help="with --dim ctx: n_ubatch (default 512)")
    g.add_argument("--batch", type=int, default=2048, metavar="N", help="n_batch (default 2048)")
    g.add_argument("--flash-attn", choices=("on", "off", "auto"), default="auto",
                   help="flash attention (default auto: on, as llama.cpp picks on the CPU)")
    g.add_argument("--kv-type", choices=KV_TYPES, default="f16", help="KV cache type (default f16)")
    g.add_argument("--seq", type=int, default=1, metavar="N",
                   help="parallel sequences (llama.cpp's n_seq_max, llama-server's -np; default 1)")
    g.add_argument("--kv-unified", action="store_true", help="one KV cache shared by the sequences")
    g.add_argument("--compute", choices=("ggml", "auto"), default="ggml",
                   help="count the compute buffer as llama.cpp's ggml-alloc reserves it (default), "
                        "or as emel's auto placement would need it")
    g.add_argument("--allow-long-context", action="store_true",
                   help="search contexts above the model's trained length (RoPE scaling)")


def run(args, budget: int) -> int:
    """emel-fit MODEL.gguf: print the answer and its two predictions; exit 0 when something fits."""
    fa = {"on": True, "off": False, "auto": "auto"}[args.flash_attn]

    def progress(value, need):
        print(f"emel-fit: {args.dim}={value}: {format_bytes(need)} "
              f"({'fits' if need <= budget else 'over'})", file=sys.stderr, flush=True)
    try:
        answer = fit_gguf(args.model, budget, args.dim, lo=args.min, hi=args.max, n_ctx=args.ctx,
                          n_ubatch=args.ubatch, n_batch=args.batch, flash_attn=fa, kv_type=args.kv_type,
                          n_seq=args.seq, kv_unified=args.kv_unified, compute=args.compute,
                          allow_long_context=args.allow_long_context, on_probe=progress)
    except (OSError, ValueError, ImportError) as e:  # PlanError is a ValueError
        print(f"emel-fit: {e}", file=sys.stderr)
        return 1
    print(answer)
    for pred, what in ((answer.prediction, "fits"), (answer.next_prediction, "over")):
        if pred is not None:
            print(f"at {answer.dim}={pred.n_ctx if answer.dim == 'ctx' else pred.n_ubatch} ({what}):")
            print(pred)
    if args.json:
        from ..cli import write_output
        if not write_output(args.json, json.dumps(answer.to_dict(), indent=1, sort_keys=True) + "\n", "emel-fit"):
            return 1
    return 0 if answer.value is not None else 1
