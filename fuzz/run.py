"""The fuzz campaign driver: every surface of targets.py, a deterministic
seed, inputs run in forked worker processes so a crash (SIGSEGV, SIGFPE,
abort) or a hang (past --timeout seconds) is caught, and every input that
is not accepted or refused as documented saved as a reproducer under
fuzz/crashes/ (gitignored).

    python fuzz/run.py --minutes 10 [--jobs 2] [--seed 1] [--surfaces graph,place]
    python fuzz/run.py --inputs 1000000 --jobs 2        # the 10^6 campaign
    python fuzz/run.py --replay fuzz/crashes/crash-place-123.pkl

Prints the inputs tried and the outcomes per surface and class: accepted,
refused (the documented error), known (a class filed elsewhere, see
targets.KNOWN), wrong (an accepted answer its oracle rejects), stray (an
undocumented exception type), crash, hang. Exit status 1 when any input
was wrong, stray, a crash or a hang.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import pickle
import sys
import time
import traceback
from multiprocessing.connection import wait
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if str(HERE.parent / "python") not in sys.path and not os.environ.get("EMEL_FUZZ_INSTALLED"):
    sys.path.insert(0, str(HERE.parent / "python"))  # the source tree's package, as in the dev loop

import targets  # noqa: E402

CLASSES = ("accepted", "refused", "known", "wrong", "stray", "crash", "hang")
BAD = ("wrong", "stray", "crash", "hang")
CRASHES = HERE / "crashes"


def _worker(conn):
    """Run inputs until the pipe closes: (surface, seed) -> (class, detail)."""
    while True:
        try:
            surface, seed = conn.recv()
        except EOFError:
            return
        try:
            outcome = targets.SURFACES[surface][1](targets.generate(surface, seed))
            conn.send((outcome, ""))
        except targets.Wrong as e:
            conn.send(("wrong", str(e)[:500]))
        except Exception as e:  # noqa: BLE001 (any type is a finding)
            tb = traceback.extract_tb(e.__traceback__)[-1]
            conn.send(("stray", f"{type(e).__name__}: {str(e)[:300]} at {tb.filename}:{tb.lineno}"))


class Worker:
    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.job = None  # (surface, seed, started)

    def stop(self, kill=False):
        if kill:
            self.proc.kill()
        self.conn.close()
        self.proc.join(timeout=5)


def save(klass: str, surface: str, seed: int, detail: str) -> Path:
    """The input as a reproducer: a pickle to --replay, and a readable repr."""
    CRASHES.mkdir(exist_ok=True)
    case = targets.generate(surface, seed)
    stem = CRASHES / f"{klass}-{surface}-{seed}"
    with open(stem.with_suffix(".pkl"), "wb") as f:
        pickle.dump({"surface": surface, "seed": seed, "class": klass, "detail": detail, "case": case}, f)
    stem.with_suffix(".txt").write_text(f"{klass} on {surface} seed {seed}: {detail}\n\n{case!r:.20000}\n")
    return stem.with_suffix(".pkl")


def campaign(inputs: int | None = None, seconds: float | None = None, seed: int = 1, jobs: int = 1,
             surfaces=None, timeout: float = 10.0, save_findings: bool = True, progress=None) -> dict:
    """Run inputs 0, 1, ... (surface = input mod the surfaces, seed derived
    from ``seed`` and the input number) until ``inputs`` or ``seconds`` run out.
    Returns the counts per surface and class, and the findings."""
    surfaces = list(surfaces or targets.SURFACES)
    ctx = mp.get_context("fork")
    workers = [Worker(ctx) for _ in range(max(1, jobs))]
    counts = {s: dict.fromkeys(CLASSES, 0) for s in surfaces}
    findings = []
    start = time.monotonic()
    deadline = start + seconds if seconds else None
    next_input, done = 0, 0

    def finish(w, klass, detail):
        nonlocal done
        surface, s, _ = w.job
        counts[surface][klass] += 1
        done += 1
        if klass in BAD:
            path = save(klass, surface, s, detail) if save_findings else None
            findings.append({"class": klass, "surface": surface, "seed": s, "detail": detail,
                             "reproducer": str(path) if path else None})
        w.job = None

    try:
        while True:
            out_of_inputs = inputs is not None and next_input >= inputs
            out_of_time = deadline is not None and time.monotonic() >= deadline
            for w in workers:  # hand out work
                if w.job is None and not out_of_inputs and not out_of_time:
                    surface = surfaces[next_input % len(surfaces)]
                    s = seed * 10**9 + next_input
                    next_input += 1
                    out_of_inputs = inputs is not None and next_input >= inputs
                    w.job = (surface, s, time.monotonic())
                    w.conn.send((surface, s))
            busy = [w for w in workers if w.job is not None]
            if not busy:
                break
            ready = wait([w.conn for w in busy], timeout=0.2)
            now = time.monotonic()
            for i, w in enumerate(workers):
                if w.job is None:
                    continue
                if w.conn in ready:
                    try:
                        klass, detail = w.conn.recv()
                    except (EOFError, ConnectionResetError):  # the worker died: a crash
                        w.proc.join(timeout=5)
                        finish(w, "crash", f"worker exited with {w.proc.exitcode} "
                                           f"(negative: killed by that signal)")
                        w.stop()
                        workers[i] = Worker(ctx)
                        continue
                    finish(w, klass, detail)
                elif now - w.job[2] > timeout:
                    finish(w, "hang", f"no answer within {timeout:g} s")
                    w.stop(kill=True)
                    workers[i] = Worker(ctx)
            if progress and done and done % progress == 0:
                print(f"  {done} inputs, {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    finally:
        for w in workers:
            w.stop(kill=True)
    elapsed = time.monotonic() - start
    return {"seed": seed, "inputs": done, "seconds": elapsed, "jobs": len(workers), "timeout": timeout,
            "counts": counts, "findings": findings, "known": targets.KNOWN}


def report(result: dict) -> None:
    counts = result["counts"]
    widths = [max(len("surface"), *(len(s) for s in counts))] + [max(len(c), 7) for c in CLASSES]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                    for i, (h, w) in enumerate(zip(("surface",) + CLASSES, widths))))
    total = dict.fromkeys(CLASSES, 0)
    for surface, row in counts.items():
        print("  ".join([surface.ljust(widths[0])] + [str(row[c]).rjust(w) for c, w in zip(CLASSES, widths[1:])]))
        for c in CLASSES:
            total[c] += row[c]
    print("  ".join(["total".ljust(widths[0])] + [str(total[c]).rjust(w) for c, w in zip(CLASSES, widths[1:])]))
    rate = result["inputs"] / result["seconds"] if result["seconds"] else 0
    print(f"\n{result['inputs']} inputs in {result['seconds']:.0f} s ({rate:.0f}/s, {result['jobs']} jobs, "
          f"seed {result['seed']}, time limit {result['timeout']:g} s per input)")
    for f in result["findings"][:20]:
        print(f"  {f['class']} {f['surface']} seed {f['seed']}: {f['detail']} -> {f['reproducer']}")


def replay(path: str) -> int:
    with open(path, "rb") as f:
        saved = pickle.load(f)
    print(f"replaying {saved['class']} on {saved['surface']} seed {saved['seed']}: {saved['detail']}")
    outcome = targets.SURFACES[saved["surface"]][1](saved["case"])  # raises, crashes or hangs as saved
    print(f"outcome now: {outcome}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--inputs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--surfaces", default=None, help="comma-separated (default: all of "
                                                     f"{', '.join(targets.SURFACES)})")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per input before it is a hang")
    ap.add_argument("--json", default=None, help="write the counts and findings here")
    ap.add_argument("--progress", type=int, default=0, help="print progress every N inputs")
    ap.add_argument("--replay", default=None, help="re-run one saved reproducer in this process")
    args = ap.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    if args.minutes is None and args.inputs is None:
        args.minutes = 1.0
    result = campaign(inputs=args.inputs, seconds=args.minutes * 60 if args.minutes else None,
                      seed=args.seed, jobs=args.jobs,
                      surfaces=args.surfaces.split(",") if args.surfaces else None,
                      timeout=args.timeout, progress=args.progress or None)
    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 1 if result["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
