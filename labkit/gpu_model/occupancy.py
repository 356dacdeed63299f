"""Launch configuration: how many blocks fit on an SM at once (occupancy), and the waves a grid takes.

A block runs on one streaming multiprocessor (SM) from start to end. An SM holds several blocks
at once, as many as its limits allow; each limit is per SM (`SM` below, from NVIDIA's *CUDA C++
Programming Guide*, "Technical Specifications per Compute Capability", and the occupancy
calculator's allocation rules):

    warps per block   w = ⌈threads / 32⌉
    by threads        ⌊max_warps / w⌋
    by blocks         max_blocks
    by registers      ⌊regs_per_sm / (w · regs_per_warp)⌋,  regs_per_warp = ⌈32·regs_per_thread / 256⌉·256
    by shared memory  ⌊smem_per_sm / (⌈smem_per_block / 128⌉·128 + reserved)⌋   (reserved: 1 KiB per block)
    blocks per SM     = the least of the four;  occupancy = blocks · w / max_warps

A grid of G blocks on S SMs then runs in **waves**: ⌈G / (S · blocks per SM)⌉ rounds, the last one
partly empty when G is not a multiple (`waves`). `schedule` assigns blocks to SM slots wave by
wave (the order a GPU's block scheduler fills a device with equal blocks; the real one hands a
new block to whichever SM frees a slot first, so later waves interleave when blocks differ).
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.checks import check_int

__all__ = ["SM", "A100", "H100", "Occupancy", "occupancy", "waves", "schedule", "Schedule"]

WARP = 32


@dataclass(frozen=True)
class SM:
    """One SM's limits (compute capability ``cc``) and the GPU's SM count.

    max_warps: resident warps per SM; max_blocks: resident blocks per SM; regs_per_sm: 32-bit
    registers; max_regs_per_thread; reg_unit: registers are given to a warp in units of this many;
    smem_per_sm: shared memory a kernel may use per SM (bytes); smem_per_block: most per block;
    smem_unit: allocation granularity (bytes); smem_reserved: bytes the system keeps per block.
    """
    name: str
    cc: str
    sms: int
    max_warps: int = 64
    max_blocks: int = 32
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    reg_unit: int = 256
    smem_per_sm: int = 164 * 1024
    smem_per_block: int = 163 * 1024
    smem_unit: int = 128
    smem_reserved: int = 1024


# Compute capability 8.0 (A100: 108 SMs) and 9.0 (H100 SXM: 132 SMs): 2048 threads (64 warps) and 32
# blocks per SM, 64 K registers, at most 255 per thread; 164 / 228 KB of shared memory per SM.
A100 = SM("A100", "8.0", 108)
H100 = SM("H100-SXM", "9.0", 132, smem_per_sm=228 * 1024, smem_per_block=227 * 1024)


@dataclass(frozen=True)
class Occupancy:
    """blocks: resident blocks per SM; limiter: which limit set it ("threads", "blocks",
    "registers", "shared memory"); limits: each limit's blocks; warps = blocks · warps per block;
    occupancy = warps / max_warps."""
    blocks: int
    limiter: str
    limits: dict
    warps: int
    occupancy: float


def occupancy(threads: int, regs_per_thread: int, smem_per_block: int, sm: SM = H100) -> Occupancy:
    """Resident blocks per SM for blocks of ``threads`` threads using ``regs_per_thread`` registers each
    and ``smem_per_block`` bytes of shared memory (module docstring for the rules)."""
    fn = "occupancy"
    threads = check_int(fn, "threads", threads, minimum=1, maximum=1024)
    regs = check_int(fn, "regs_per_thread", regs_per_thread, minimum=1, maximum=sm.max_regs_per_thread)
    smem = check_int(fn, "smem_per_block", smem_per_block, minimum=0, maximum=sm.smem_per_block)
    w = -(-threads // WARP)
    regs_per_warp = -(-regs * WARP // sm.reg_unit) * sm.reg_unit
    smem_alloc = -(-smem // sm.smem_unit) * sm.smem_unit + sm.smem_reserved
    limits = {"threads": sm.max_warps // w, "blocks": sm.max_blocks,
              "registers": sm.regs_per_sm // (w * regs_per_warp),
              "shared memory": sm.smem_per_sm // smem_alloc}
    limiter = min(limits, key=limits.get)
    blocks = limits[limiter]
    return Occupancy(blocks, limiter, limits, blocks * w, blocks * w / sm.max_warps)


def waves(blocks: int, sms: int, blocks_per_sm: int) -> int:
    """⌈blocks / (sms · blocks_per_sm)⌉: rounds of a full device a grid of ``blocks`` needs."""
    blocks = check_int("waves", "blocks", blocks, minimum=0)
    per_wave = check_int("waves", "sms", sms, minimum=1) * check_int("waves", "blocks_per_sm", blocks_per_sm,
                                                                       minimum=1)
    return -(-blocks // per_wave)


@dataclass(frozen=True)
class Schedule:
    """slots[w][s] = the blocks (linear ids) SM s runs in wave w (at most blocks_per_sm each)."""
    sms: int
    blocks_per_sm: int
    slots: tuple

    @property
    def waves(self) -> int:
        return len(self.slots)

    @property
    def last_wave_fill(self) -> float:
        """Share of the last wave's slots that hold a block (1.0: no tail)."""
        if not self.slots:
            return 1.0
        return sum(len(s) for s in self.slots[-1]) / (self.sms * self.blocks_per_sm)


def schedule(blocks: int, sms: int, blocks_per_sm: int) -> Schedule:
    """Blocks 0, 1, 2, ... dealt to SMs round-robin, a wave at a time (block b of wave w goes to SM
    (b mod sms)); every wave but the last is full."""
    n = waves(blocks, sms, blocks_per_sm)
    per_wave = sms * blocks_per_sm
    out = []
    for w in range(n):
        ids = range(w * per_wave, min(blocks, (w + 1) * per_wave))
        out.append(tuple(tuple(b for b in ids if (b - w * per_wave) % sms == s) for s in range(sms)))
    return Schedule(sms, blocks_per_sm, tuple(out))
