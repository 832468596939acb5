"""The Verifier's cost in an ExecuTorch export: emel's check against ExecuTorch's own loop.

``memory_planning_pass()`` checks every plan by ExecuTorch's
``Verifier.verify_storage_reuse`` rules (``verify=True``). ExecuTorch's loop
compares every pair of specs and formats both specs' text for each pair, so
its cost grows with the square of the specs; emel's ``verify`` looks only at
the pairs that can break a rule (docs/executorch.md). This exports a chain of
``n`` elementwise ops (``torch.nn`` only: sin, add, a rotation by ``cat``
every fifth op, skip connections) with ExecuTorch's default pass, emel's
without a check, and emel's with its check, and times ``verify`` and
ExecuTorch's loop (``exhaustive=True``) on the planned program; both must
count the same reuse pairs.

    python bench/executorch_verify.py [--ops 300,600,1500] [--exhaustive-up-to 600] [--out r.json]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from executorch.exir import ExecutorchBackendConfig, to_edge

from _common import print_table, write_json
from emel.memory.executorch import memory_planning_pass, verify


class Chain(torch.nn.Module):
    """``n`` elementwise ops whose activations all reuse a few bytes."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        skips = []
        for i in range(self.n):
            x = torch.sin(x) + (skips[-7] if len(skips) >= 7 and i % 3 == 0 else 0.5)
            if i % 5 == 0:
                x = torch.cat([x[:, 1:], x[:, :1] * 2], 1)
            skips.append(x)
        return x


def _export(edge, planning_pass=None):
    config = ExecutorchBackendConfig() if planning_pass is None else \
        ExecutorchBackendConfig(memory_planning_pass=planning_pass)
    start = time.perf_counter()
    program = copy.deepcopy(edge).to_executorch(config)
    return program, time.perf_counter() - start


def measure(n: int, exhaustive: bool) -> dict:
    with torch.no_grad():
        edge = to_edge(torch.export.export(Chain(n).eval(), (torch.randn(2, 8),)))
    _, default_s = _export(edge)
    _, unchecked_s = _export(edge, memory_planning_pass(keep_default=False, verify=False))
    checked = memory_planning_pass(keep_default=False)
    program, checked_s = _export(edge, checked)
    ep = program.exported_program()
    start = time.perf_counter()
    pairs = verify(ep.graph_module, ep.graph_signature)
    verify_s = time.perf_counter() - start
    row = {"ops": n, "call_nodes": sum(1 for node in ep.graph_module.graph.nodes if node.op == "call_function"),
           "default_export_s": default_s, "emel_unchecked_export_s": unchecked_s,
           "emel_checked_export_s": checked_s, "reuse_pairs": pairs, "verify_s": verify_s,
           "executorch_loop_s": None, "same_count": None}
    if exhaustive:
        start = time.perf_counter()
        theirs = verify(ep.graph_module, ep.graph_signature, exhaustive=True)
        row["executorch_loop_s"] = time.perf_counter() - start
        row["same_count"] = theirs == pairs
        if theirs != pairs:
            raise SystemExit(f"{n} ops: emel counts {pairs} reuse pairs, ExecuTorch's loop {theirs}")
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="300,600,1500", help="chain lengths")
    ap.add_argument("--exhaustive-up-to", type=int, default=600,
                    help="run ExecuTorch's own loop up to this many ops (it takes minutes beyond)")
    ap.add_argument("--out", help="JSON path (default bench/results/executorch_verify.json)")
    args = ap.parse_args(argv)
    rows = [measure(int(n), int(n) <= args.exhaustive_up_to) for n in args.ops.split(",")]
    print_table(rows, [("ops", "ops", "d"), ("call_nodes", "call nodes", "d"),
                       ("default_export_s", "default export s", ".2f"),
                       ("emel_unchecked_export_s", "emel verify=False s", ".2f"),
                       ("emel_checked_export_s", "emel verify=True s", ".2f"),
                       ("reuse_pairs", "reuse pairs", "d"), ("verify_s", "emel verify s", ".3f"),
                       ("executorch_loop_s", "ExecuTorch loop s", ".2f"), ("same_count", "same count", "")])
    write_json("executorch_verify", {"command": "python bench/executorch_verify.py " +
                                     f"--ops {args.ops} --exhaustive-up-to {args.exhaustive_up_to}",
                                     "rows": rows}, args.out)


if __name__ == "__main__":
    main()
