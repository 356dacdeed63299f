"""Blocked matmul (labkit.matmul.blocked) vs BLAS torch.matmul, GFLOP/s vs tile size, same run.

    .venv/bin/python benchmarks/matmul.py [--n 1024] [--tiles 16 32 64 128 256 512] [--quick]

Writes benchmarks/results/matmul.md. On a CUDA GPU it also times torch.matmul in
fp32 / tf32 / bf16 on large square matrices and reports TFLOP/s.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from labkit.bench import median_time, write_results  # noqa: E402
from labkit.matmul.blocked import matmul_flops, measure  # noqa: E402


def gpu_rows(n: int) -> list:
    rows = []
    for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                              ("bf16", torch.bfloat16, False), ("fp16", torch.float16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        A = torch.randn(n, n, device="cuda", dtype=dtype)
        B = torch.randn(n, n, device="cuda", dtype=dtype)
        s = median_time(lambda: A @ B, repeat=10, warmup=3, min_time_s=0.05)
        rows.append((f"torch.matmul {name}", n, s * 1e3, matmul_flops(n, n, n) / s / 1e12))
    torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--tiles", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads while timing (default 1)")
    ap.add_argument("--quick", action="store_true", help="n=256, tiles 16 64 256, one repeat")
    ap.add_argument("--no-write", action="store_true", help="print only")
    a = ap.parse_args(argv)
    if a.quick:
        a.n, a.tiles, a.repeat = 256, [16, 64, 256], 1
    res = measure(a.n, a.tiles, repeat=a.repeat, threads=a.threads)
    header = ["implementation", "n", "tile", "time (ms)", "GFLOP/s", "ratio to BLAS"]
    rows = [("torch.matmul (BLAS)", a.n, "-", res["blas_s"] * 1e3, res["blas_gflops"], 1.0)]
    rows += [("blocked (labkit)", a.n, tile, s * 1e3, gf, ratio) for tile, s, gf, ratio in res["rows"]]
    for r in rows:
        print(f"{r[0]:<22} n={r[1]:<5} tile={r[2]!s:<4} {r[3]:9.2f} ms {r[4]:8.2f} GFLOP/s  x{r[5]:.3f} of BLAS")
    notes = ("CPU, float32, torch threads = %d while timing; best of 3 interleaved rounds of median times. "
             "GFLOP/s = 2n^3 / time. The blocked loop calls BLAS on tile x tile blocks, so small tiles pay "
             "Python/dispatch overhead per block and large tiles approach one BLAS call." % res["threads"])
    if torch.cuda.is_available():
        g = gpu_rows(8192)
        for r in g:
            print(f"{r[0]:<22} n={r[1]} {r[2]:.2f} ms {r[3]:.1f} TFLOP/s")
        notes += "\n\nGPU (%s):\n\n| op | n | time (ms) | TFLOP/s |\n|---|---|---|---|\n" % torch.cuda.get_device_name()
        notes += "\n".join(f"| {r[0]} | {r[1]} | {r[2]:.3g} | {r[3]:.4g} |" for r in g)
    if not a.no_write:
        path = write_results("matmul", "Blocked matmul vs BLAS (GFLOP/s vs tile size)", header, rows, notes,
                             ran_on="cpu" + (" (and the GPU section below)" if torch.cuda.is_available() else ""))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
