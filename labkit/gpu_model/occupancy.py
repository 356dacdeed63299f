"""Occupancy: how many warps an SM keeps resident, from what one block asks for.

An SM runs a block only when it has room for all of it at once: its warps (a warp slot each),
its registers (registers per thread × 32, rounded up to 256 per warp, each warp's share taken
from one of the SM's 4 scheduler partitions) and its shared memory (rounded up to 128 bytes,
plus 1 KiB the runtime reserves per block; the largest shared-memory carveout assumed). The scarcest of the three, and the
cap on blocks per SM, decide how many blocks are resident; their warps are what the scheduler
picks from each cycle, so they are what hides memory latency (Little's law: bytes in flight =
bandwidth × latency).

    occupancy(threads_per_block, regs_per_thread, smem_per_block, sm=H100)   -> Occupancy
    waves(blocks, blocks_per_sm, sms)                                          -> Waves
    schedule(blocks, blocks_per_sm, sms)                                       -> Schedule (who runs where)
    bytes_in_flight(bandwidth, latency)                                        -> bytes (Little's law)

The limits are the published ones of each compute capability (CUDA C++ Programming Guide,
"Features and Technical Specifications"; the occupancy calculator's allocation rules). This is
the calculation of `cudaOccupancyMaxActiveBlocksPerMultiprocessor`, without a GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.checks import check_int, check_real

__all__ = ["SMLimits", "H100", "A100", "Occupancy", "occupancy", "Waves", "waves", "Schedule", "schedule",
           "bytes_in_flight", "blocks_per_sm"]


@dataclass(frozen=True)
class SMLimits:
    """One streaming multiprocessor's limits: warps, blocks, 32-bit registers and shared memory
    (bytes) per SM; shared memory one block may use; registers one thread may use; the
    register allocation unit (registers, per warp) and the shared memory reserved per block."""

    name: str
    max_warps: int
    max_blocks: int
    registers: int
    smem_bytes: int
    smem_per_block: int
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256
    reg_partitions: int = 4
    smem_alloc_unit: int = 128
    smem_reserved_per_block: int = 1024
    sms: int = 1


H100 = SMLimits("H100 SXM (sm_90)", max_warps=64, max_blocks=32, registers=65536, smem_bytes=228 * 1024,
                smem_per_block=227 * 1024, sms=132)
A100 = SMLimits("A100 (sm_80)", max_warps=64, max_blocks=32, registers=65536, smem_bytes=164 * 1024,
                smem_per_block=163 * 1024, sms=108)


@dataclass(frozen=True)
class Occupancy:
    """``blocks_by``: the blocks per SM each resource allows ("warps", "regs", "smem" (shared memory),
    "blocks"); ``blocks`` the smallest of them; ``warps`` = blocks · warps_per_block;
    ``fraction`` = warps / the SM's warp slots; ``limiter``: the resource(s) that set ``blocks``."""

    warps_per_block: int
    blocks_by: dict
    blocks: int
    warps: int
    fraction: float
    limiter: str


def blocks_per_sm(threads, regs_per_thread, smem_per_block, sm):
    """Resident blocks per SM, and the limit(s) that set it (the rules in this module's docstring).

    threads: threads per block (1..1024); regs_per_thread: registers per thread; smem_per_block:
    bytes of shared memory per block; sm: a dict of the SM's limits (ints): "max_warps",
    "max_blocks", "registers", "reg_alloc_unit", "reg_partitions", "smem_bytes",
    "smem_alloc_unit", "smem_reserved_per_block". With w = ceil(threads / 32) warps per block,
    each limit in blocks per SM:
        "warps":  max_warps // w
        "regs":   a warp takes all its registers (32 * regs_per_thread, rounded up to a multiple
                  of reg_alloc_unit) from one of the register file's reg_partitions equal parts;
                  the warps that fit, // w
        "smem":   smem_bytes // (smem_per_block rounded up to a multiple of smem_alloc_unit, plus
                  smem_reserved_per_block)
        "blocks": max_blocks
    Return (blocks, limiter): the smallest limit (0 if a block cannot fit), and the names of every
    limit equal to it, in the order above, joined by "+" (e.g. "warps+regs").
    """
    # BEGIN SOLUTION
    # HINT: compute the four limits separately, rounding each allocation up to its unit before
    # HINT: dividing; registers are shared out per partition, so fit whole warps in one partition first.
    w = -(-threads // 32)
    regs_per_warp = -(-32 * regs_per_thread // sm["reg_alloc_unit"]) * sm["reg_alloc_unit"]
    warps_by_regs = sm["reg_partitions"] * ((sm["registers"] // sm["reg_partitions"]) // regs_per_warp)
    smem = -(-smem_per_block // sm["smem_alloc_unit"]) * sm["smem_alloc_unit"] + sm["smem_reserved_per_block"]
    limits = {"warps": sm["max_warps"] // w, "regs": warps_by_regs // w, "smem": sm["smem_bytes"] // smem,
              "blocks": sm["max_blocks"]}
    blocks = min(limits.values())
    return blocks, "+".join(k for k, v in limits.items() if v == blocks)
    # END SOLUTION


# BEGIN SOLUTION (lab03_matmul: labkit's checked occupancy with every limit; it answers blocks_per_sm)
def occupancy(threads_per_block: int, regs_per_thread: int, smem_per_block: int = 0,
              sm: SMLimits = H100) -> Occupancy:
    """Resident blocks and warps per SM for a kernel whose blocks have ``threads_per_block``
    threads, each using ``regs_per_thread`` registers, and ``smem_per_block`` bytes of shared
    memory (the allocation rules are in the module docstring). A block that cannot fit at all
    raises ValueError."""
    fn = "occupancy"
    threads = check_int(fn, "threads_per_block", threads_per_block, minimum=1, maximum=1024)
    regs = check_int(fn, "regs_per_thread", regs_per_thread, minimum=1,
                     maximum=sm.max_regs_per_thread)
    smem = check_int(fn, "smem_per_block", smem_per_block, minimum=0)
    if smem > sm.smem_per_block:
        raise ValueError(f"{fn}: a block may use at most {sm.smem_per_block} bytes of shared "
                         f"memory on {sm.name}, got {smem}")
    wpb = math.ceil(threads / 32)
    regs_per_warp = math.ceil(regs * 32 / sm.reg_alloc_unit) * sm.reg_alloc_unit
    warps_by_regs = sm.reg_partitions * ((sm.registers // sm.reg_partitions) // regs_per_warp)
    smem_block = (math.ceil(smem / sm.smem_alloc_unit) * sm.smem_alloc_unit
                  + sm.smem_reserved_per_block)
    by = {"warps": sm.max_warps // wpb,
          "regs": warps_by_regs // wpb,
          "smem": sm.smem_bytes // smem_block,
          "blocks": sm.max_blocks}
    blocks = min(by.values())
    if blocks == 0:
        raise ValueError(f"{fn}: one block of {threads} threads x {regs} registers does not fit in "
                         f"{sm.registers} registers")
    warps = blocks * wpb
    limiter = "+".join(k for k, v in by.items() if v == blocks)
    return Occupancy(wpb, by, blocks, warps, warps / sm.max_warps, limiter)
# END SOLUTION


@dataclass(frozen=True)
class Waves:
    """A grid of ``blocks`` on ``sms`` SMs holding ``blocks_per_sm`` each: ``waves`` =
    ceil(blocks / slots) rounds of ``slots`` = sms · blocks_per_sm; ``busy`` = blocks / (waves ·
    slots), the share of block slots doing work over the run when all blocks take equally long."""

    slots: int
    waves: int
    busy: float


def waves(blocks: int, blocks_per_sm: int, sms: int = H100.sms) -> Waves:
    """How many rounds a grid takes and how busy its slots are (the partly idle last wave)."""
    blocks = check_int("waves", "blocks", blocks, minimum=1)
    slots = check_int("waves", "sms", sms, minimum=1) * check_int("waves", "blocks_per_sm", blocks_per_sm,
                                                                  minimum=1)
    n = math.ceil(blocks / slots)
    return Waves(slots, n, blocks / (n * slots))


@dataclass(frozen=True)
class Schedule:
    """``slots[w][s]``: the blocks (linear ids) SM ``s`` runs in wave ``w``, at most ``blocks_per_sm``
    each; every wave but the last is full."""

    sms: int
    blocks_per_sm: int
    slots: tuple

    @property
    def waves(self) -> int:
        return len(self.slots)

    @property
    def last_wave_fill(self) -> float:
        """Share of the last wave's slots that hold a block (1.0: no partly idle tail)."""
        if not self.slots:
            return 1.0
        return sum(len(s) for s in self.slots[-1]) / (self.sms * self.blocks_per_sm)


def schedule(blocks: int, blocks_per_sm: int, sms: int = H100.sms) -> Schedule:
    """Blocks 0, 1, 2, ... dealt to SMs a wave at a time, round-robin (block b of wave w on SM
    b mod sms): how a block scheduler fills a device with equal blocks. (A real one hands the next
    block to whichever SM frees a slot first, so unequal blocks interleave later waves.)"""
    n = waves(blocks, blocks_per_sm, sms).waves
    per_wave = sms * blocks_per_sm
    out = []
    for w in range(n):
        ids = range(w * per_wave, min(blocks, (w + 1) * per_wave))
        out.append(tuple(tuple(b for b in ids if (b - w * per_wave) % sms == s) for s in range(sms)))
    return Schedule(sms, blocks_per_sm, tuple(out))


def bytes_in_flight(bandwidth: float, latency: float) -> float:
    """Little's law: bytes that must be on their way at every moment to sustain ``bandwidth``
    (bytes/s) when each request takes ``latency`` seconds."""
    return check_real("bytes_in_flight", "bandwidth", bandwidth, positive=True) * \
        check_real("bytes_in_flight", "latency", latency, positive=True)
