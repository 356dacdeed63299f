"""The GPU path, checked without a GPU: every labkit kernel compiles for an H100 (sm_90) to a cubin.

The interpreter runs kernels as Python, so it cannot catch code the compiler
rejects (types that differ between loop iterations, unsupported ops, tl.dot
shapes). Triton ships ptxas, so a CPU-only machine can still compile each
kernel for a target GPU; this runs in a subprocess with TRITON_INTERPRET=0.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import os, sys
os.environ["TRITON_INTERPRET"] = "0"
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
import labkit.kernels
A, S, M, L, T = (sys.modules["labkit.kernels." + m] for m in ("add", "softmax", "matmul", "layernorm", "attention"))
target = GPUTarget("cuda", 90, 32)
ptr = lambda t: "*" + t
def comp(fn, sig, consts):
    sig = {k: ("constexpr" if k in consts else v) for k, v in sig.items()}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target)
    assert "cubin" in k.asm, fn.__name__
    print("compiled", fn.__name__, consts)
comp(A.add_kernel, dict(x_ptr="*fp32", y_ptr="*fp32", out_ptr="*fp32", n="i32", BLOCK=0), dict(BLOCK=1024))
for nb in (1, 2):
    comp(S.softmax_kernel, dict(x_ptr="*fp16", out_ptr="*fp16", n_cols="i32", stride_x="i32", stride_out="i32",
                                BLOCK=0, NUM_BLOCKS=0), dict(BLOCK=4096, NUM_BLOCKS=nb))
cfg = M.GPU_CONFIGS[0].kwargs
comp(M.matmul_kernel, dict(a_ptr="*bf16", b_ptr="*bf16", c_ptr="*bf16", M="i32", N="i32", K="i32", stride_am="i32",
                           stride_ak="i32", stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32",
                           BLOCK_M=0, BLOCK_N=0, BLOCK_K=0, GROUP_M=0, DOT_FP32=0), dict(cfg, DOT_FP32=False))
comp(L.layernorm_kernel, dict(x_ptr="*fp16", w_ptr="*fp16", b_ptr="*fp16", y_ptr="*fp16", mean_ptr="*fp32",
                              rstd_ptr="*fp32", n_cols="i32", eps="fp32", BLOCK=0, NUM_BLOCKS=0), dict(BLOCK=1024, NUM_BLOCKS=2))
comp(L.layernorm_bwd_dx_kernel, dict(dy_ptr="*fp32", x_ptr="*fp32", w_ptr="*fp32", mean_ptr="*fp32", rstd_ptr="*fp32",
                                     dx_ptr="*fp32", pdw_ptr="*fp32", pdb_ptr="*fp32", n_cols="i32", BLOCK=0, NUM_BLOCKS=0),
     dict(BLOCK=1024, NUM_BLOCKS=2))
comp(L.column_sum_kernel, dict(p_ptr="*fp32", out_ptr="*fp32", n_rows="i32", n_cols="i32", BLOCK_R=0, BLOCK_C=0),
     dict(BLOCK_R=16, BLOCK_C=128))
comp(T.attention_kernel, dict(q_ptr="*fp16", k_ptr="*fp16", v_ptr="*fp16", o_ptr="*fp16", seq_q="i32", seq_k="i32",
                              head_dim="i32", scale="fp32", stride_qh="i32", stride_qm="i32", stride_kh="i32",
                              stride_kn="i32", stride_vh="i32", stride_vn="i32", stride_oh="i32", stride_om="i32",
                              BLOCK_M=0, BLOCK_N=0, BLOCK_D=0, CAUSAL=0, DOT_FP32=0),
     dict(BLOCK_M=128, BLOCK_N=64, BLOCK_D=64, CAUSAL=True, DOT_FP32=False))
print("ALL OK")
'''


def _nvidia_backend_available() -> bool:
    try:
        import triton.backends.nvidia  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(not _nvidia_backend_available(), reason="Triton's NVIDIA backend is not installed")
def test_all_kernels_compile_for_sm90():
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=230)
    assert proc.returncode == 0 and "ALL OK" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.count("compiled") == 8
