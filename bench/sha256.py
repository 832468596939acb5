"""Throughput of the core's SHA-256 implementations (portable, SHA-NI) against hashlib.

For each message size, hashes the same buffer repeatedly with
_core.sha256(data, implementation=...) and reports MB/s (10^6 bytes per
second, best of --repeat rounds; includes the binding's copy of the bytes,
which is small next to the hashing). hashlib (OpenSSL) is the yardstick.
Prints a table and writes JSON (default bench/results/sha256.json).

    python bench/sha256.py [--repeat 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import time

from _common import print_table, write_json

from emel.memory import _core

SIZES = [64, 1024, 64 * 1024, 1024 * 1024]
TOTAL_BYTES = 32 * 1024 * 1024  # hashed per round, whatever the message size


def available_implementations() -> list[str]:
    impls = ["portable"]
    try:
        _core.sha256(b"", "shani")
        impls.append("shani")
    except ValueError:
        pass
    return impls


def best_rate(hash_once, size: int, repeat: int) -> float:
    calls = max(1, TOTAL_BYTES // size)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            hash_once()
        best = min(best, time.perf_counter() - start)
    return calls * size / best / 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    impls = available_implementations()
    rows = []
    for size in SIZES:
        data = bytes(i % 251 for i in range(size))
        row = {"size": size}
        for impl in impls:
            row[impl] = best_rate(lambda: _core.sha256(data, impl), size, args.repeat)
        row["hashlib"] = best_rate(lambda: hashlib.sha256(data).digest(), size, args.repeat)
        rows.append(row)

    print(f"auto uses: {_core.sha256_implementation()}\n")
    print_table(rows, [("size", "bytes", ",d")] + [(k, f"{k} MB/s", ".0f") for k in impls + ["hashlib"]])
    write_json("sha256", {"auto": _core.sha256_implementation(), "rows": rows}, args.out)


if __name__ == "__main__":
    main()
