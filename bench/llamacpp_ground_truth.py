"""Ground truth for emel.memory.from_gguf: llama.cpp's own buffer sizes, in bytes.

Builds llama.cpp (the tree vendored in the llama-cpp-python source
distribution), compiles bench/llamacpp_probe.cpp against it, writes tiny
random-weight GGUFs (bench/tiny_gguf.py), runs llama.cpp on a grid of
configurations (model x n_ctx x n_ubatch x flash attention x KV type) and
records the exact bytes of its model, KV, output and compute buffers
(llama_get_memory_breakdown and the output buffer's size) into
tests/data/llamacpp_buffers.json, which the tests check the predictions
against (CI does not build llama.cpp). It prints a table of llama.cpp's
bytes beside emel's prediction and writes it as JSON.

    python bench/llamacpp_ground_truth.py --download /work/llamacpp       # fetch, build, measure
    python bench/llamacpp_ground_truth.py --llama-cpp PATH/vendor/llama.cpp   # a tree already built
    ... --fit-params      # also llama.cpp's llama-fit-params estimates beside emel's
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tiny_gguf import LARGE_MODELS, TINY_MODELS, write_tiny_gguf

HERE = Path(__file__).resolve().parent
TABLE = HERE.parent / "tests" / "data" / "llamacpp_buffers.json"

N_CTX = (256, 1000, 4096)
N_UBATCH = (1, 96, 512)
#: (flash attention, K type, V type): llama.cpp's default, the two attention
#: paths, a quantized cache (with its Hadamard rotation when the head is 64 wide)
#: and a quantized K beside an f16 V without flash attention.
ATTENTION = ((False, "f16", "f16"), (True, "f16", "f16"), (True, "q8_0", "q8_0"), (False, "q8_0", "f16"))
#: Extra rows: a small n_batch (caps the ubatch) and a context below the ubatch.
EXTRA = (dict(n_ctx=1024, n_batch=128, n_ubatch=512), dict(n_ctx=200, n_batch=2048, n_ubatch=512))
#: The other cache types, at one size: (flash attention, K type, V type).
OTHER_KV = ((True, "q4_0", "q4_0"), (True, "q5_1", "iq4_nl"), (True, "bf16", "bf16"), (False, "f32", "f32"),
            (False, "q4_1", "f16"))
#: Several sequences (llama-server's parallel slots): one KV stream each, or one unified cache.
SEQUENCES = (dict(n_ctx=1000, n_ubatch=300), dict(n_ctx=2048, n_ubatch=512))
#: The wide models: long contexts and big ubatches (without flash attention only at 8192: its
#: KQ matrix alone is n_head x n_ctx x n_ubatch x 4 bytes).
LARGE = tuple((n_ctx, n_ubatch, fa, tk, tv) for n_ctx in (8192, 32768) for n_ubatch in (512, 2048)
              for fa, tk, tv in ATTENTION[:3] if fa or n_ctx == 8192)


def run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def download(where: Path) -> Path:
    """pip download the llama-cpp-python sdist into `where`, unpack it; its llama.cpp tree."""
    where.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--no-build-isolation", "llama-cpp-python", "-d", where])
    sdist = sorted(where.glob("llama_cpp_python-*.tar.gz"))[-1]
    with tarfile.open(sdist) as tar:
        try:
            tar.extractall(where, filter="data")
        except TypeError:  # Python before 3.11.4: no extraction filters
            tar.extractall(where)
    return where / sdist.name[:-len(".tar.gz")] / "vendor" / "llama.cpp"


def build(tree: Path) -> None:
    """cmake configure (CPU only, portable) and build libllama, niced: 10+ minutes on 2 cores."""
    if not (tree / "build" / "build.ninja").exists():
        run(["nice", "-n", "10", "cmake", "-S", tree, "-B", tree / "build", "-G", "Ninja",
             "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DLLAMA_CURL=OFF"])
    run(["nice", "-n", "10", "cmake", "--build", tree / "build", "--target", "llama", "-j", "2"])


def compile_probe(tree: Path) -> Path:
    out = tree / "build" / "emel_probe"
    src = HERE / "llamacpp_probe.cpp"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        lib = tree / "build" / "bin"
        run(["g++", "-std=c++17", "-O1", f"-I{tree / 'include'}", f"-I{tree / 'ggml' / 'include'}",
             f"-I{tree / 'ggml' / 'src'}", f"-I{tree / 'src'}", src, "-o", out, f"-L{lib}", "-lllama",
             "-lggml", "-lggml-base", f"-Wl,-rpath,{lib}"])
    return out


def version(tree: Path) -> dict:
    """Which llama.cpp was measured: the sdist, the git commit, ggml's version."""
    info = {"source": tree.parent.parent.name if tree.parent.name == "vendor" else str(tree)}
    try:
        info["commit"] = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], check=True,
                                        capture_output=True, text=True).stdout.strip()
        info["commit_date"] = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%cI"],
                                             check=True, capture_output=True, text=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        pass
    cmake = (tree / "ggml" / "CMakeLists.txt").read_text(errors="replace")
    parts = [re.search(rf"GGML_VERSION_{k}\s+(\d+)", cmake) for k in ("MAJOR", "MINOR", "PATCH")]
    if all(parts):
        info["ggml_version"] = ".".join(p.group(1) for p in parts)
    return info


def probe(exe: Path, model: Path, n_ctx, n_batch, n_ubatch, fa, type_k, type_v, n_seq=1, kv_unified=False,
          dump=False) -> dict | None:
    """One llama.cpp context; None when llama.cpp refuses the configuration."""
    p = subprocess.run([str(exe), str(model), str(n_ctx), str(n_batch), str(n_ubatch), str(n_seq), str(int(fa)),
                        type_k, type_v, "0", str(int(dump)), str(int(kv_unified))], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    return json.loads(p.stdout)


def grid():
    for name, spec in TINY_MODELS.items():
        for n_ctx, n_ubatch, (fa, tk, tv) in itertools.product(N_CTX, N_UBATCH, ATTENTION):
            if n_ctx <= spec["n_ctx_train"]:
                yield name, dict(n_ctx=n_ctx, n_batch=2048, n_ubatch=n_ubatch, n_seq=1, kv_unified=False,
                                 flash_attn=fa, type_k=tk, type_v=tv)
        for extra, (fa, tk, tv) in itertools.product(EXTRA, ATTENTION[:2]):
            yield name, dict(extra, n_seq=1, kv_unified=False, flash_attn=fa, type_k=tk, type_v=tv)
        for seqs, n_seq, unified, (fa, tk, tv) in itertools.product(SEQUENCES, (2, 4), (False, True),
                                                                     ATTENTION[:2]):
            yield name, dict(seqs, n_batch=2048, n_seq=n_seq, kv_unified=unified, flash_attn=fa,
                             type_k=tk, type_v=tv)
        for fa, tk, tv in OTHER_KV:
            yield name, dict(n_ctx=1000, n_batch=2048, n_ubatch=300, n_seq=1, kv_unified=False, flash_attn=fa,
                             type_k=tk, type_v=tv)
    for name in LARGE_MODELS:
        for n_ctx, n_ubatch, fa, tk, tv in LARGE:
            yield name, dict(n_ctx=n_ctx, n_batch=2048, n_ubatch=n_ubatch, n_seq=1, kv_unified=False,
                             flash_attn=fa, type_k=tk, type_v=tv)


def measure(exe: Path, models_dir: Path) -> list[dict]:
    rows = []
    for name, cfg in grid():
        path = models_dir / f"{name}.gguf"
        out = probe(exe, path, cfg["n_ctx"], cfg["n_batch"], cfg["n_ubatch"], cfg["flash_attn"],
                    cfg["type_k"], cfg["type_v"], cfg["n_seq"], cfg["kv_unified"], dump=True)
        row = {"model": name, **cfg}
        if out is None:
            row["refused"] = True
        else:
            bufs = {b["buft"]: b for b in out["buffers"]}
            if not set(bufs) <= {"CPU", "CPU_REPACK"}:
                raise RuntimeError(f"{name} {cfg}: buffer types {sorted(bufs)}, expected CPU (and CPU_REPACK)")
            row.update(llama_n_ctx=out["n_ctx"], llama_n_seq=out["n_seq_max"], llama_n_batch=out["n_batch"],
                       llama_n_ubatch=out["n_ubatch"], buffer_types=sorted(bufs),
                       model_bytes=sum(b["model"] for b in bufs.values()),
                       kv_bytes=sum(b["context"] for b in bufs.values()), output_bytes=out["output"],
                       compute_bytes=sum(b["compute"] for b in bufs.values()), graph_nodes=len(out["pp"]["nodes"]))
        rows.append(row)
        print(f"  {name:<15} ctx={cfg['n_ctx']:<5} ubatch={cfg['n_ubatch']:<4} batch={cfg['n_batch']:<5} "
              f"seq={cfg['n_seq']}{'u' if cfg['kv_unified'] else ' '} "
              f"fa={int(cfg['flash_attn'])} kv={cfg['type_k']}/{cfg['type_v']:<5} "
              + ("refused" if out is None else f"compute={row['compute_bytes']:>10,} kv={row['kv_bytes']:>9,}"),
              file=sys.stderr, flush=True)
    return rows


def compare(rows: list[dict], models_dir: Path) -> list[dict]:
    """emel's prediction beside each row: equal or not, per buffer."""
    from emel.memory import PlanError, from_gguf
    out = []
    for row in rows:
        kw = dict(n_ctx=row["n_ctx"], n_batch=row["n_batch"], n_ubatch=row["n_ubatch"], n_seq=row["n_seq"],
                  kv_unified=row["kv_unified"], flash_attn=row["flash_attn"], kv_type=row["type_k"],
                  type_v=row["type_v"])
        try:
            p = from_gguf(models_dir / f"{row['model']}.gguf", auto=True, **kw)
        except PlanError as e:
            out.append({**row, "emel": "PlanError", "match": bool(row.get("refused")), "error": str(e)})
            continue
        if row.get("refused"):
            out.append({**row, "emel": p.compute_bytes, "match": False})
            continue
        same = {k: getattr(p, k) == row[k] for k in ("model_bytes", "kv_bytes", "output_bytes",
                                                      "compute_bytes", "graph_nodes")}
        out.append({**row, "emel_compute_bytes": p.compute_bytes, "emel_compute_bytes_auto": p.compute_bytes_auto,
                    "match": all(same.values()), "mismatched": [k for k, v in same.items() if not v]})
    return out


#: llama-fit-params beside emel: (model, n_ctx, flash attention).
FIT_PARAMS = (("llama-gqa", 4096, False), ("llama-gqa", 4096, True), ("qwen2", 32768, False),
              ("qwen2", 32768, True), ("llama-mha-tied", 0, False), ("llama-wide", 32768, True))


def fit_params(tree: Path, models_dir: Path) -> list[dict]:
    """llama.cpp's llama-fit-params -fitp on (its estimate in whole MiB: device, model, context,
    compute) beside emel's bytes for the same files. On a CPU-only build it fits nothing."""
    from emel.memory import from_gguf
    run(["nice", "-n", "10", "cmake", "--build", tree / "build", "--target", "llama-fit-params", "-j", "2"])
    exe = tree / "build" / "bin" / "llama-fit-params"
    rows = []
    for name, n_ctx, fa in FIT_PARAMS:
        path = models_dir / f"{name}.gguf"
        p = subprocess.run([str(exe), "-m", str(path), "-c", str(n_ctx), "-fa", "on" if fa else "off",
                            "-fitp", "on"], capture_output=True, text=True, check=True)
        fields = p.stdout.strip().splitlines()[-1].split()
        pred = from_gguf(path, n_ctx=n_ctx, flash_attn=fa, auto=False)
        rows.append({"model": name, "n_ctx": n_ctx, "flash_attn": fa, "llama_fit_params": fields,
                     "emel_mib": [round(pred.model_bytes / 2**20, 2), round(pred.kv_bytes / 2**20, 2),
                                  round(pred.compute_bytes / 2**20, 2)]})
    print(f"{'model':<15} {'n_ctx':>5} fa  llama-fit-params (MiB)   emel (MiB: model, KV, compute)")
    for r in rows:
        print(f"{r['model']:<15} {r['n_ctx']:>5} {int(r['flash_attn']):>2}  {' '.join(r['llama_fit_params']):<24} "
              f"{', '.join(str(x) for x in r['emel_mib'])}")
    return rows


def table_text(table: dict) -> str:
    """The table as JSON: the header indented, one line per row (readable diffs, half the bytes)."""
    head = json.dumps({k: v for k, v in table.items() if k != "rows"}, indent=1)
    rows = ",\n  ".join(json.dumps(r, sort_keys=True) for r in table["rows"])
    return head[:-2] + ',\n "rows": [\n  ' + rows + "\n ]\n}\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", type=Path, help="llama.cpp source tree (vendor/llama.cpp of the sdist)")
    ap.add_argument("--download", type=Path, metavar="DIR",
                    help="pip download and unpack the llama-cpp-python sdist into DIR first")
    ap.add_argument("--no-build", action="store_true", help="the tree is built already (build/bin/libllama.so)")
    ap.add_argument("--table", type=Path, default=TABLE, help=f"ground-truth table to write (default {TABLE})")
    ap.add_argument("--json", type=Path, default=None, help="also write the comparison with emel here")
    ap.add_argument("--fit-params", action="store_true",
                    help="also build llama-fit-params and print its estimates beside emel's")
    args = ap.parse_args(argv)
    tree = download(args.download) if args.download else args.llama_cpp
    if tree is None:
        ap.error("give --llama-cpp TREE or --download DIR")
    tree = tree.resolve()
    if not args.no_build:
        build(tree)
    exe = compile_probe(tree)
    with tempfile.TemporaryDirectory() as tmp:
        models_dir = Path(tmp)
        for name, spec in {**TINY_MODELS, **LARGE_MODELS}.items():
            write_tiny_gguf(models_dir / f"{name}.gguf", **spec)
        rows = measure(exe, models_dir)
        table = {"about": "llama.cpp's buffer sizes in bytes (CPU backend) for the models of "
                          "bench/tiny_gguf.py (TINY_MODELS, LARGE_MODELS); written by "
                          "bench/llamacpp_ground_truth.py; refused: llama.cpp would not create the context",
                 "llama_cpp": version(tree), "models": TINY_MODELS, "large_models": LARGE_MODELS,
                 "rows": rows}
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(table_text(table))
        compared = compare(rows, models_dir)
        fitted = fit_params(tree, models_dir) if args.fit_params else None
    n_match = sum(r["match"] for r in compared)
    print(f"{'model':<15} {'n_ctx':>5} {'ubatch':>6} {'seq':>4} {'fa':>2} {'kv':<10} {'llama.cpp compute':>18} "
          f"{'emel (ggml)':>12} {'emel auto':>12} match")
    for r in compared:
        kv = f"{r['type_k']}/{r['type_v']}"
        seq = f"{r['n_seq']}{'u' if r['kv_unified'] else ''}"
        if r.get("refused"):
            print(f"{r['model']:<15} {r['n_ctx']:>5} {r['n_ubatch']:>6} {seq:>4} {int(r['flash_attn']):>2} {kv:<10} "
                  f"{'refused':>18} {'PlanError' if r['emel'] == 'PlanError' else r['emel']:>12} {'':>12} "
                  f"{'yes' if r['match'] else 'NO'}")
            continue
        print(f"{r['model']:<15} {r['n_ctx']:>5} {r['n_ubatch']:>6} {seq:>4} {int(r['flash_attn']):>2} {kv:<10} "
              f"{r['compute_bytes']:>18,} {r.get('emel_compute_bytes', 0):>12,} "
              f"{r.get('emel_compute_bytes_auto') or 0:>12,} {'yes' if r['match'] else 'NO ' + ','.join(r.get('mismatched', []))}")
    print(f"{n_match}/{len(compared)} configurations match llama.cpp exactly "
          f"(model, KV, output, compute bytes and graph nodes; refusals as PlanError)")
    if args.json:
        args.json.write_text(json.dumps({"llama_cpp": table["llama_cpp"], "rows": compared,
                                         "llama_fit_params": fitted}, indent=1) + "\n")
    return 0 if n_match == len(compared) else 1


if __name__ == "__main__":
    sys.exit(main())
