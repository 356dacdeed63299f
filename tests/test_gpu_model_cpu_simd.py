"""labkit.gpu_model.cpu_simd: the CPU measurements run and point the right way (loose factors only)."""
import pytest
import torch

from labkit.gpu_model import cpu_simd as S


def test_simd_vs_gather_runs_and_random_gather_is_slower():
    threads = torch.get_num_threads()
    res = S.simd_vs_gather(n=1 << 22, stride=8, repeat=3)
    assert torch.get_num_threads() == threads                       # restored after the one-thread run
    assert res.m == (1 << 22) // 8 and len(res.rows) == 4
    assert all(r.seconds > 0 and r.gbps > 0 for r in res.rows)
    # measured here ~50-200x; 2x leaves room for a busy shared machine
    assert res.ratio("gather, random indices") > 2
    assert "contiguous" in str(res.table())


def test_access_order_random_is_slower_than_sequential():
    res = S.access_order(n=1 << 22, repeat=3)
    assert res.sequential.gbps > 0 and res.random.gbps > 0 and res.direct.gbps > 0
    assert res.ratio > 1.5                                            # measured here ~5x at this size
    assert res.random.useful_bytes == res.sequential.useful_bytes == 4 << 22


def test_checks():
    with pytest.raises(ValueError, match="simd_vs_gather: n"):
        S.simd_vs_gather(n=10)
    with pytest.raises(TypeError, match="access_order: threads"):
        S.access_order(n=1 << 12, threads=1.5)
