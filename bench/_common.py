"""Shared helpers of the benchmark scripts: where the data is, tables, JSON."""

from __future__ import annotations

import json
import platform
import subprocess
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"  # graphs, dsa instances, baselines (data/README.md)
RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    return {"python": platform.python_version(), "machine": platform.machine(), "cpu": cpu,
            "commit": commit, "date": time.strftime("%Y-%m-%d")}


def print_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> None:
    """columns: (key, header, format spec)."""
    cells = [[format(r[k], f) if r.get(k) is not None else "-" for k, _, f in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, (_, h, _) in enumerate(columns)]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                    for i, ((_, h, _), w) in enumerate(zip(columns, widths))))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(c, widths))))


def write_json(name: str, payload: dict, out: str | None = None) -> Path:
    path = Path(out) if out else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=1))
    print(f"\nwrote {path}")
    return path
