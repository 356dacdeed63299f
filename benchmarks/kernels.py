"""Lab 04 benchmark: labkit's Triton kernels vs PyTorch, measured in the same run.

GPU: medians of `labkit.bench.median_time` (the course's one timer; each sample loops a call for
>= 20 ms and synchronises) for
- softmax (fp32, M=4096, N=256..16384) in GB/s (2*M*N*4 bytes moved) vs torch.softmax,
- matmul (n=256..8192, fp16 and bf16) in TFLOP/s (2*n^3) vs torch.matmul (cuBLAS),
- attention (fp16, B=4, H=16, D=64, S=512..4096, causal and not) in TFLOP/s
  (4*B*H*S^2*D, halved when causal) vs F.scaled_dot_product_attention,
each as a ratio (torch time / our time: > 1 means we are faster) and as % of
the device's peak; the table goes to benchmarks/results/kernels.md.
Targets on an H100/H200: softmax >= 0.9x torch for N >= 1024; matmul >= 0.85x
cuBLAS at 4096^3 bf16.

CPU (no GPU): timings of the interpreter mean nothing, so this only checks
correctness on small shapes and says so; exit status 0 when all match.

    python benchmarks/kernels.py [--quick]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import labkit  # noqa: E402,F401  (sets TRITON_INTERPRET=1 when there is no GPU)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from labkit.kernels import attention, layernorm, matmul, softmax  # noqa: E402
from labkit.kernels.add import add  # noqa: E402

# Dense (no sparsity) peaks from NVIDIA's datasheets: HBM bytes/s and fp16/bf16 tensor-core FLOP/s.
PEAKS = {
    "H200": (4.8e12, 989e12),
    "H100 PCIe": (2.0e12, 756e12),
    "H100": (3.35e12, 989e12),          # SXM
    "A100": (2.0e12, 312e12),           # 80 GB SXM
}


def device_peaks(name: str):
    for key, val in PEAKS.items():
        if key in name:
            return val
    return (None, None)


def pct(x, peak):
    return f"{100 * x / peak:.0f}%" if peak else "n/a"


def check_cpu() -> int:
    """Correctness on small shapes under the interpreter; returns the number of mismatches."""
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    cases = []
    x, y = r(1000), r(1000)
    cases.append(("add n=1000", add(x, y), x + y, 0.0))
    x = r(64, 300)
    cases.append(("softmax 64x300", softmax(x), torch.softmax(x, -1), 1e-6))
    a, b = r(70, 50), r(50, 90)
    cases.append(("matmul 70x50x90 fp32", matmul(a, b), a @ b, 1e-5))
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
    cases.append(("matmul 70x50x90 bf16", matmul(a16, b16).float(), (a16.float() @ b16.float()).bfloat16().float(), 2e-2))
    w, bb = r(300), r(300)
    cases.append(("layernorm 64x300", layernorm(x, w, bb), F.layer_norm(x, (300,), w, bb), 1e-5))
    q, k, v = r(1, 2, 40, 32), r(1, 2, 40, 32), r(1, 2, 40, 32)
    cases.append(("attention causal 1x2x40x32", attention(q, k, v, causal=True),
                  F.scaled_dot_product_attention(q, k, v, is_causal=True), 1e-5))
    bad = 0
    for name, got, want, tol in cases:
        err = (got - want).abs().max().item()
        ok = err <= tol + tol * want.abs().max().item()
        bad += not ok
        print(f"  {name:28s} max abs err {err:.2e}  {'ok' if ok else 'MISMATCH'}")
    return bad


def bench_gpu(quick: bool) -> None:
    from labkit.bench import median_time, write_results

    name = torch.cuda.get_device_name(0)
    bw_peak, fl_peak = device_peaks(name)
    ms = lambda fn: median_time(fn, repeat=7, warmup=3, min_time_s=0.02) * 1e3  # noqa: E731  (median, milliseconds)
    rows = []
    # softmax
    M = 4096
    for N in ([1024, 4096] if quick else [256, 512, 1024, 2048, 4096, 8192, 16384]):
        x = torch.randn(M, N, device="cuda")
        torch.testing.assert_close(softmax(x), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
        t_ours, t_ref = ms(lambda: softmax(x)), ms(lambda: torch.softmax(x, -1))
        gbs = 2 * M * N * 4 / (t_ours * 1e-3)
        rows.append(["softmax fp32", f"{M}x{N}", f"{gbs / 1e9:.0f} GB/s", f"{2 * M * N * 4 / (t_ref * 1e-3) / 1e9:.0f} GB/s",
                     round(t_ref / t_ours, 2), pct(gbs, bw_peak)])
        print(rows[-1])
    # matmul
    for dtype in (torch.float16, torch.bfloat16):
        for n in ([1024, 4096] if quick else [256, 512, 1024, 2048, 4096, 8192]):
            a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
            c = matmul(a, b)
            torch.testing.assert_close(c.float(), (a @ b).float(), rtol=2e-2, atol=2e-1 * (n / 256) ** 0.5)
            t_ours, t_ref = ms(lambda: matmul(a, b)), ms(lambda: a @ b)
            tf, tf_ref = 2 * n**3 / (t_ours * 1e-3), 2 * n**3 / (t_ref * 1e-3)
            rows.append([f"matmul {str(dtype)[6:]}", f"{n}^3", f"{tf / 1e12:.0f} TFLOP/s", f"{tf_ref / 1e12:.0f} TFLOP/s",
                         round(t_ref / t_ours, 2), pct(tf, fl_peak)])
            print(rows[-1])
    # attention
    B, H, D = 4, 16, 64
    for causal in (False, True):
        for S in ([1024] if quick else [512, 1024, 2048, 4096]):
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
            torch.testing.assert_close(attention(q, k, v, causal=causal),
                                       F.scaled_dot_product_attention(q, k, v, is_causal=causal), rtol=1e-2, atol=1e-2)
            t_ours = ms(lambda: attention(q, k, v, causal=causal))
            t_ref = ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            flops = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
            rows.append([f"attention fp16{' causal' if causal else ''}", f"B{B} H{H} S{S} D{D}",
                         f"{flops / (t_ours * 1e-3) / 1e12:.0f} TFLOP/s", f"{flops / (t_ref * 1e-3) / 1e12:.0f} TFLOP/s",
                         round(t_ref / t_ours, 2), pct(flops / (t_ours * 1e-3), fl_peak)])
            print(rows[-1])
    path = write_results(
        "kernels", "Lab 04: Triton kernels vs PyTorch",
        ["kernel", "shape", "ours", "torch", "speed ratio (torch time / ours)", "% of peak (ours)"], rows,
        notes=("Medians of labkit.bench.median_time. Peaks (dense, datasheet): "
               + (f"{bw_peak / 1e12:.2f} TB/s, {fl_peak / 1e12:.0f} TFLOP/s fp16/bf16." if bw_peak else "unknown device.")
               + " Targets: softmax >= 0.9x torch for N >= 1024; matmul >= 0.85x cuBLAS at 4096^3 bf16."),
        ran_on=f"cuda ({name})")
    print(f"wrote {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes")
    args = ap.parse_args(argv)
    if torch.cuda.is_available():
        bench_gpu(args.quick)
        return 0
    print("No GPU: Triton runs in its interpreter here, so timings would measure Python, not the kernel.\n"
          "Timings (GB/s, TFLOP/s vs torch) need a GPU; checking correctness on small shapes only:")
    bad = check_cpu()
    print("all kernels match torch" if not bad else f"{bad} mismatch(es)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
