"""Below today's bound: reorder() and remat() on real graphs (docs/below-bound.md).

1. Every graph in data/graphs, every mode: the lower bound and the
   `auto` arena of the reusing arenas under the given order, then under
   `plan(order="optimize")`, and the time reorder() took.
2. The remat curve of the training graphs of data/graphs (backward mode): budget
   (a fraction of the `auto` activations arena) -> placed arena, recompute
   cost, units recomputed; or the smallest arena remat reached.
3. PyTorch's min_cut_rematerialization_partition at each
   activation_memory_budget, beside remat: their saved set planned by emel
   (`auto`, backward mode; also reordered), their recompute cost under emel's
   cost model, and remat's answer on the same program (AOTAutograd's default
   partition, which saves every activation) at their placed arena and at the
   same fraction of the no-recompute arena. Needs torch.

    python bench/below_bound.py [--budget-ms 1000] [--no-torch] [--out FILE]
"""

from __future__ import annotations

import argparse
import time

import emel.memory as mm
from _common import DATA, print_table, write_json
from emel.memory.cost_model import graph_costs

FRACTIONS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)
TORCH_BUDGETS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1.0)


def reusing(plan):
    arenas = [a for a in plan.arenas.values() if not a.persistent]
    return sum(a.size for a in arenas), sum(a.lower_bound for a in arenas)


def branchy_model():
    """Heads written breadth first (every head's wide hidden layer, then every
    reduction), as a list comprehension does: an order with room to move."""
    import torch

    class Heads(torch.nn.Module):
        def __init__(self, n=8):
            super().__init__()
            self.up = torch.nn.ModuleList(torch.nn.Linear(256, 4096) for _ in range(n))
            self.down = torch.nn.ModuleList(torch.nn.Linear(4096, 16) for _ in range(n))

        def forward(self, x):
            hidden = [torch.relu(up(x)) for up in self.up]
            return torch.cat([down(h) for down, h in zip(self.down, hidden)], dim=1)

    torch.manual_seed(0)
    return mm.from_torch(Heads(), torch.randn(64, 256), name="heads-breadth-first")


def reorder_table(budget_ms, with_torch=True):
    rows = []
    graphs = [(p.stem, mm.load_graph(p)) for p in sorted((DATA / "graphs").glob("*.json"))]
    if with_torch:
        graphs.append(("heads-breadth-first (torch)", branchy_model()))
    for stem, graph in graphs:
        for mode in mm.MODES:
            given = mm.plan(graph, mode=mode, strategy="auto")
            t = time.perf_counter()
            new = mm.reorder(graph, mode, budget_ms)
            seconds = time.perf_counter() - t
            best = mm.plan(graph, mode=mode, strategy="auto", order="optimize",
                           time_budget_ms=budget_ms)
            (a0, b0), (a1, b1) = reusing(given), reusing(best)
            rows.append({"graph": stem, "mode": mode, "bound": b0, "arena": a0,
                         "bound_after": b1, "arena_after": a1,
                         "saved": 1 - a1 / a0 if a0 else 0.0,
                         "moved": sum(x != y for x, y in zip(new.execution_order,
                                                             given.graph.execution_order or
                                                             [n["id"] for n in graph.nodes])),
                         "seconds": seconds})
    print(f"\n## reorder (time_budget_ms={budget_ms}): reusing arenas, bytes\n")
    print_table(rows, [("graph", "graph", ""), ("mode", "mode", ""), ("bound", "bound", ",d"),
                       ("arena", "auto", ",d"), ("bound_after", "bound after", ",d"),
                       ("arena_after", "auto after", ",d"), ("saved", "saved", ".1%"),
                       ("moved", "steps moved", "d"), ("seconds", "reorder s", ".2f")])
    return rows


def remat_row(g, budget, **extra):
    t = time.perf_counter()
    try:
        _, plan, report = mm.remat(g, budget)
        row = {"arena": report.arena_after, "bound": report.bound_after,
               "units": len(report.recompute_nodes), "cost": report.cost, "fits": True}
    except mm.PlanError as e:
        smallest = int(e.message.split("reached is ")[1].split()[0])
        row = {"arena": None, "smallest": smallest, "cost": None, "fits": False}
    row.update(budget=budget, seconds=time.perf_counter() - t, **extra)
    return row


def remat_curves():
    rows = []
    for path in sorted((DATA / "graphs").glob("*training*.json")):
        graph = mm.load_graph(path)
        base = mm.plan(graph, mode="backward", strategy="auto").arenas["activations"].size
        for f in FRACTIONS:
            rows.append(remat_row(graph, int(base * f), graph=path.stem, fraction=f, base=base))
    print("\n## remat curve (backward mode, activations arena placed by auto)\n")
    print_table(rows, [("graph", "graph", ""), ("fraction", "budget / arena", ".2f"),
                       ("budget", "budget", ",d"), ("arena", "arena", ",d"),
                       ("smallest", "unreachable: smallest", ",d"), ("units", "nodes replayed", "d"),
                       ("cost", "recompute cost", ",d"), ("seconds", "s", ".2f")])
    return rows


def torch_models():
    import torch

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            layers, c = [], 3
            for width in (32, 64, 64, 128):
                layers += [torch.nn.Conv2d(c, width, 3, padding=1), torch.nn.ReLU()]
                c = width
            self.f = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                         torch.nn.Linear(c, 10))

        def forward(self, x):
            return self.f(x)

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = (torch.nn.Linear(256, 4096), torch.nn.Linear(4096, 4096),
                                      torch.nn.Linear(4096, 256))

        def forward(self, x):
            return self.c(torch.nn.functional.gelu(self.b(torch.relu(self.a(x)))))

    def transformer():
        return torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(
            128, 4, 512, dropout=0.0, batch_first=True) for _ in range(2)])

    torch.manual_seed(0)
    return [("small CNN (4 conv, 16x3x64x64)", CNN(), torch.randn(16, 3, 64, 64)),
            ("transformer (2 layers, 8x128x128)", transformer(), torch.randn(8, 128, 128)),
            ("wide MLP (256-4096-4096-256, 512 rows)", MLP(), torch.randn(512, 256))]


def partitioner_table(budget_ms):
    import torch
    from emel.memory.remat_torch import partitioned_graph
    torch.set_num_threads(1)
    rows, defaults = [], []
    for name, model, x in torch_models():
        default = partitioned_graph(model, x, None)
        base_cost = sum(graph_costs(default).values())
        base = mm.plan(default, mode="backward", strategy="auto").arenas["activations"].size
        defaults.append((name, default, base))
        for b in TORCH_BUDGETS:
            theirs = partitioned_graph(model, x, b)
            plan = mm.plan(theirs, mode="backward", strategy="auto")
            arena = plan.arenas["activations"].size
            reordered = mm.plan(theirs, mode="backward", strategy="auto", order="optimize",
                                time_budget_ms=budget_ms).arenas["activations"].size
            saved = sum(mm.graph.tensor_bytes(t) for t in theirs.tensors
                        if t.get("saved_for_backward") and "view_of" not in t)
            at_theirs = remat_row(default, arena)
            at_fraction = remat_row(default, int(base * b))
            rows.append({"model": name, "budget": b, "saved": saved, "arena": arena,
                         "ratio": arena / base,
                         "reordered": reordered, "cost": sum(graph_costs(theirs).values()) - base_cost,
                         "base": base,
                         "ours_at_theirs": (f"{at_theirs['arena']:,}" if at_theirs["fits"]
                                            else f"> {at_theirs['smallest']:,}"),
                         "ours_cost_at_theirs": at_theirs["cost"],
                         "ours_at_fraction": (f"{at_fraction['arena']:,}" if at_fraction["fits"]
                                              else f"> {at_fraction['smallest']:,}"),
                         "ours_cost_at_fraction": at_fraction["cost"]})
    print("\n## PyTorch min-cut partitioner vs remat (activations arena placed by emel auto)\n")
    print("cost: emel.memory.cost_model units (FLOPs for matmul/conv, bytes moved otherwise),")
    print("relative to AOTAutograd's default partition, which recomputes nothing.\n")
    print_table(rows, [("model", "model", ""), ("budget", "budget", ".2f"),
                       ("saved", "their saved bytes", ",d"), ("arena", "their arena", ",d"),
                       ("ratio", "/ default", ".2f"),
                       ("reordered", "theirs reordered", ",d"), ("cost", "their cost", ",d"),
                       ("ours_at_theirs", "remat at their arena", ""),
                       ("ours_cost_at_theirs", "cost", ",d"),
                       ("ours_at_fraction", "remat at budget x default", ""),
                       ("ours_cost_at_fraction", "cost", ",d")])
    curve = []
    for name, graph, base in defaults:
        for f in FRACTIONS:
            curve.append(remat_row(graph, int(base * f), model=name, fraction=f, base=base))
    print("\n## remat curve on the same programs (AOTAutograd default partition)\n")
    print_table(curve, [("model", "model", ""), ("fraction", "budget / default arena", ".2f"),
                        ("budget", "budget", ",d"), ("arena", "arena", ",d"),
                        ("smallest", "unreachable: smallest", ",d"),
                        ("units", "nodes replayed", "d"), ("cost", "recompute cost", ",d"),
                        ("seconds", "s", ".2f")])
    return rows, curve


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-ms", type=int, default=1000, help="reorder's time_budget_ms")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    parser.add_argument("--out", help="JSON file (default bench/results/below_bound.json)")
    args = parser.parse_args(argv)
    payload = {"reorder": reorder_table(args.budget_ms, not args.no_torch), "remat": remat_curves()}
    if not args.no_torch:
        payload["partitioner"], payload["remat_torch"] = partitioner_table(args.budget_ms)
    write_json("below_bound", payload, args.out)


if __name__ == "__main__":
    main()
