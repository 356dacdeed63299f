"""labkit.gpu_model.occupancy: resident warps from a block's threads, registers and shared memory,
on hand-computed cases (CUDA's occupancy rules), waves and Little's law."""
import math

import pytest

from labkit.gpu_model.occupancy import A100, H100, bytes_in_flight, occupancy, waves


@pytest.mark.parametrize("threads,regs,smem,blocks,warps,limiter", [
    (256, 32, 0, 8, 64, "warps+regs"),          # 1024 regs/warp: 64 warps fit either way
    (256, 64, 0, 4, 32, "regs"),                # 2048 regs/warp: 32 warps
    (256, 128, 0, 2, 16, "regs"),
    (128, 40, 0, 12, 48, "regs"),               # 40·32 = 1280 regs/warp; 16384 / 1280 = 12 per partition
    (256, 48, 0, 5, 40, "regs"),                # 1536 regs/warp: 10 per partition, not 42 per SM
    (128, 32, 48 * 1024, 4, 16, "smem"),    # 228 KiB / (48 + 1) KiB = 4 blocks
    (64, 32, 0, 32, 64, "warps+regs+blocks"),
    (1024, 32, 0, 2, 64, "warps+regs"),
    (96, 33, 100, 16, 48, "regs"),              # 3 warps; 33 regs -> 1280 per warp; 100 B -> 128 + 1024
])
def test_hand_computed_cases_on_h100(threads, regs, smem, blocks, warps, limiter):
    o = occupancy(threads, regs, smem)
    assert (o.blocks, o.warps, o.limiter) == (blocks, warps, limiter)
    assert o.fraction == warps / 64 and o.warps_per_block == math.ceil(threads / 32)


def test_shared_memory_rounding_and_the_a100s_smaller_shared_memory():
    assert occupancy(128, 32, 1).blocks_by["smem"] == 228 * 1024 // (128 + 1024)
    assert occupancy(128, 32, 64 * 1024).blocks == 3 and occupancy(128, 32, 64 * 1024, A100).blocks == 2


def test_more_registers_or_shared_memory_never_raise_occupancy():
    for regs in range(16, 248, 7):
        assert occupancy(256, regs + 7).warps <= occupancy(256, regs).warps
    for kib in range(0, 200, 9):
        assert occupancy(128, 32, (kib + 9) * 1024).warps <= occupancy(128, 32, kib * 1024).warps


def test_bad_blocks_are_refused():
    with pytest.raises(ValueError, match="at most 232448 bytes"):
        occupancy(128, 32, 228 * 1024)
    with pytest.raises(ValueError, match="threads_per_block"):
        occupancy(2048, 32)
    with pytest.raises(ValueError, match="regs_per_thread"):
        occupancy(128, 256)
    with pytest.raises(ValueError, match="does not fit"):
        occupancy(1024, 255)


def test_waves_and_littles_law():
    w = waves(1000, 8, 132)
    assert (w.slots, w.waves) == (1056, 1) and w.busy == 1000 / 1056
    assert waves(1057, 8, 132).waves == 2 and waves(1057, 8, 132).busy == pytest.approx(1057 / 2112)
    assert waves(100 * 1056, 8, 132).busy == 1.0
    assert bytes_in_flight(2e12, 500e-9) == pytest.approx(1e6)
    with pytest.raises(ValueError):
        bytes_in_flight(-1, 1)
