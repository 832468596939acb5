"""Golden allocation traces: every model graph (data/graphs) x mode, planned with the
default strategy (tmmu) and alignment, stored as gzipped JSON Lines under
tests/golden/<graph>.<mode>.jsonl.gz (docs/determinism.md §6).

    python scripts/golden_traces.py            # check: exit 1 on any difference
    python scripts/golden_traces.py --update   # regenerate them on purpose

Each trace is built from the C++ core's plan and must be identical to the one
built from the reference's plan before it is compared or written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
GRAPHS = ROOT / "data" / "graphs"   # the model graphs of the repository (data/README.md)
if any(p.suffix in (".so", ".pyd") for p in (ROOT / "python" / "emel" / "memory").glob("_core*")):
    # a checkout with its core built in place; otherwise the emel on the path (a wheel)
    sys.path.insert(0, str(ROOT / "python"))

import emel.memory as mm  # noqa: E402
from emel.memory import reference  # noqa: E402
from emel.memory.trace import encode, first_difference, parse, trace_records  # noqa: E402

MODES = ("inference", "forward", "backward")


def golden_path(graph: Path, mode: str) -> Path:
    return GOLDEN / f"{graph.stem}.{mode}.jsonl.gz"


def cases(graphs: Path = GRAPHS):
    return [(graph, mode) for graph in sorted(graphs.glob("*.json")) for mode in MODES]


def fresh_records(graph: Path, mode: str) -> list[dict]:
    """The trace of one case, after checking core and reference agree on it."""
    document = json.loads(graph.read_text())
    core = trace_records(mm.plan(document, strategy="tmmu", mode=mode).to_dict())
    ref = trace_records(reference.plan(document, mode=mode))
    diff = first_difference(ref, core)
    if diff is not None:
        raise AssertionError(f"{graph.name} {mode}: core and reference traces differ: {diff}")
    return core


def check(graph: Path, mode: str) -> str | None:
    """None when the committed golden trace matches a fresh one, else why not."""
    path = golden_path(graph, mode)
    if not path.exists():
        return f"{path.relative_to(ROOT)} is missing (run with --update)"
    diff = first_difference(fresh_records(graph, mode), parse(path.read_bytes()))
    return None if diff is None else f"{path.relative_to(ROOT)}: {diff}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the golden traces")
    args = parser.parse_args(argv)
    if not GRAPHS.is_dir():
        print(f"no model graphs at {GRAPHS}", file=sys.stderr)
        return 2
    failures = 0
    for graph, mode in cases():
        if args.update:
            path = golden_path(graph, mode)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode(fresh_records(graph, mode), path.name))
            print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
            continue
        problem = check(graph, mode)
        print(f"{'FAIL' if problem else 'ok  '} {graph.stem} {mode}{': ' + problem if problem else ''}")
        failures += problem is not None
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
