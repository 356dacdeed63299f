"""When does ZeRO-3's traffic hide behind compute? FSDP prefetch, measured and predicted.

With prefetch (`FSDP(prefetch=True)`) the all-gather of the next unit runs while the current
unit computes. It hides completely when a unit's compute takes at least as long as a unit's
all-gather. For a unit of Ψᵤ parameters, T tokens per rank, F FLOP/s and B bytes/s per rank
on the link, e bytes per parameter on the wire, N ranks:

    compute (forward)  2·Ψᵤ·T / F          all-gather   (N−1)/N · Ψᵤ·e / B

so the traffic hides once

    T ≥ T_min = F · e · (N−1) / (2 · N · B)        tokens per rank          (`min_tokens`)

— independent of the unit's size. Backward does twice the FLOPs and moves twice the bytes (an
all-gather and a reduce-scatter), the same ratio. On 8 H100s at their peak (989 TFLOP/s dense
bf16) that is about 1 900 tokens per GPU over NVLink (450 GB/s per direction) and about 17 000
over one 400 Gb/s InfiniBand link per GPU (`hardware_table`); at a lower MFU fewer tokens do,
since slower compute covers the same transfer.

`measure(world, cfg, batch)` trains the same model with and without prefetch in the same rank
processes, alternating step by step, and reports per step: the time, the time spent blocked on
all-gathers (``FSDP.gather_wait_s``: the exposed traffic), the peak of gathered parameter bytes
(``FSDP.gathered_peak_bytes``) and of all bytes (MemoryTracker). The hidden fraction is
1 − exposed(prefetch)/exposed(none). `rates(world)` measures this machine's F (a unit's matmuls
on one rank) and B (an all-gather of a unit's parameters on ``world`` ranks) for T_min here.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from labkit.checks import check_int, check_real
from labkit.table import Table

H100_BF16_FLOPS = 989e12           # dense bf16 tensor-core peak, FLOP/s
NVLINK4_BYTES = 450e9              # NVLink 4 per GPU, each direction (900 GB/s both ways)
IB_NDR_BYTES = 50e9                # one 400 Gb/s InfiniBand NDR link per GPU


def min_tokens(flops_per_s: float, bytes_per_s: float, world: int, param_bytes: float = 2) -> float:
    """T_min: tokens per rank above which a unit's compute hides its all-gather (module docstring)."""
    f = check_real("min_tokens", "flops_per_s", flops_per_s, positive=True)
    b = check_real("min_tokens", "bytes_per_s", bytes_per_s, positive=True)
    n = check_int("min_tokens", "world", world, minimum=1)
    e = check_real("min_tokens", "param_bytes", param_bytes, positive=True)
    return f * e * (n - 1) / (2 * n * b)


def hardware_table(world: int = 8, mfu: float = 1.0, here: tuple | None = None) -> Table:
    """T_min for ``world`` H100s over NVLink and over InfiniBand (bf16 on the wire), at ``mfu`` of the
    peak FLOP/s; ``here`` = (F, B, bytes per parameter, ranks) measured on this machine adds its row."""
    rows = [(f"H100, NVLink 4 ({NVLINK4_BYTES / 1e9:.0f} GB/s)", mfu * H100_BF16_FLOPS / 1e12, NVLINK4_BYTES / 1e9,
             min_tokens(mfu * H100_BF16_FLOPS, NVLINK4_BYTES, world)),
            (f"H100, InfiniBand NDR ({IB_NDR_BYTES / 1e9:.0f} GB/s)", mfu * H100_BF16_FLOPS / 1e12,
             IB_NDR_BYTES / 1e9, min_tokens(mfu * H100_BF16_FLOPS, IB_NDR_BYTES, world))]
    if here is not None:
        f, b, e, n = here
        rows.append((f"this machine, {n} gloo ranks (measured)", f / 1e12, b / 1e9, min_tokens(f, b, n, e)))
    return Table(["device and link", "TFLOP/s", "GB/s", "T_min tokens/rank"], rows,
                 formats={"TFLOP/s": ".3g", "GB/s": ".3g", "T_min tokens/rank": ",.0f"},
                 title=f"H100s: N = {world}, bf16; a unit's compute hides its all-gather from T_min tokens "
                       "per rank on")


# ------------------------------------------------------------------------------ measured
def _rates_rank(rank, world, hidden, ffn, tokens, repeat):
    from labkit.bench import median_time

    g = torch.Generator().manual_seed(rank)
    x = torch.randn(tokens, hidden, generator=g)
    w1, w2 = torch.randn(hidden, ffn, generator=g), torch.randn(ffn, hidden, generator=g)
    compute_s = median_time(lambda: (x @ w1) @ w2, repeat=repeat)
    flops = 2 * 2 * tokens * hidden * ffn
    unit = torch.randn(4 * hidden * hidden + 2 * hidden * ffn, generator=g)   # a block's parameters
    shard = unit.chunk(world)[rank].contiguous()
    out = torch.empty(shard.numel() * world)
    dist.barrier()
    gather_s = median_time(lambda: dist.all_gather_single(out, shard), repeat=repeat)
    return flops / compute_s, (world - 1) / world * unit.numel() * 4 / gather_s


def rates(world: int = 2, hidden: int = 256, tokens: int = 256, repeat: int = 7) -> tuple:
    """(F FLOP/s of a transformer block's MLP matmuls on one rank, B bytes/s one rank receives in
    an all-gather of a block's float32 parameters) on ``world`` gloo ranks, rank 0's medians."""
    from labkit.dist import launch

    return launch(_rates_rank, world, hidden, 4 * hidden, tokens, repeat, backend="gloo", timeout=300, quiet=True)[0]


@dataclass(frozen=True)
class PrefetchRun:
    """Medians per step on rank 0 (seconds, bytes), without (``off``) and with (``on``) prefetch."""

    world: int
    tokens: int                  # per rank and step
    step_s: dict                 # {False: s, True: s}
    wait_s: dict                 # seconds blocked on all-gathers
    gathered_peak: dict          # bytes of gathered vectors alive at most
    peak: dict                   # MemoryTracker's peak of a whole step
    unit_bytes: int              # one block's gathered vector
    max_diff: float              # largest |parameter difference| between the two after training

    @property
    def hidden_fraction(self) -> float:
        """1 − exposed all-gather time with prefetch / without."""
        return 1.0 - self.wait_s[True] / self.wait_s[False]


def _measure_rank(rank, world, cfg, batch_per_rank, steps):
    from labkit.memory.tracker import MemoryTracker
    from labkit.model import GPT, batch
    from labkit.zero.fsdp import FSDP

    sides = {}
    for prefetch in (False, True):
        model = FSDP(GPT(cfg, seed=0, dtype=torch.float32), prefetch=prefetch)
        sides[prefetch] = (model, torch.optim.SGD(model.parameters(), lr=1e-2))
    times, waits = {False: [], True: []}, {False: [], True: []}
    peaks = {}
    for step in range(steps + 1):
        tokens, targets = batch(cfg, batch_per_rank, seed=step * world + rank)
        for prefetch, (model, opt) in sides.items():
            opt.zero_grad(set_to_none=True)
            model.gather_wait_s = 0.0
            tracker = MemoryTracker(model, opt)
            dist.barrier()
            t0 = time.perf_counter()
            with tracker:
                model(tokens, targets)[1].backward()
                model.finish_gradient_synchronization()
            t = time.perf_counter() - t0
            opt.step()
            if step:                                   # the first step warms up
                times[prefetch].append(t)
                waits[prefetch].append(model.gather_wait_s)
            peaks[prefetch] = tracker.peak_bytes
    a, b = (sides[p][0].gather_full_params() for p in (False, True))
    unit = max(g.layout.padded for u in sides[True][0].units[1:] for g in u.groups if g.sharded) * 4
    return PrefetchRun(world, batch_per_rank * cfg.seq_len, {k: statistics.median(v) for k, v in times.items()},
                       {k: statistics.median(v) for k, v in waits.items()},
                       {k: sides[k][0].gathered_peak_bytes for k in sides}, peaks, unit,
                       max((a[k] - b[k]).abs().max().item() for k in a))


def measure(world: int = 2, cfg=None, batch_per_rank: int = 2, steps: int = 5) -> PrefetchRun:
    """Our FSDP with and without prefetch on ``world`` gloo ranks (module docstring)."""
    from labkit.dist import launch
    from labkit.model import GPTConfig

    cfg = cfg or GPTConfig(layers=4, hidden=128, heads=4, seq_len=64, vocab=256)
    return launch(_measure_rank, world, cfg, batch_per_rank, steps, backend="gloo", timeout=600, quiet=True)[0]


def _trace_rank(rank, world, cfg, prefetch):
    from labkit.model import GPT, batch
    from labkit.zero.fsdp import FSDP

    model = FSDP(GPT(cfg, seed=0, dtype=torch.float32), prefetch=prefetch)
    model(*batch(cfg, 2, seed=rank))[1].backward()
    model.finish_gradient_synchronization()
    return model.events


def trace_table(world: int = 2, cfg=None) -> Table:
    """One forward + backward of FSDP with prefetch: its events in order, and the units whose
    gathered parameters exist at that moment (held, or on their way after a posted gather)."""
    from labkit.dist import launch
    from labkit.model import DATA_PARALLEL_GPT

    cfg = cfg or DATA_PARALLEL_GPT
    events = launch(_trace_rank, world, cfg, True, backend="gloo", timeout=60, quiet=True)[0]
    whole, rows = [], []
    for what, unit, phase in events:
        name = unit or "root"
        if what in ("gather", "prefetch"):
            whole.append(name)
        elif what == "free":
            whole.remove(name)
        rows.append((len(rows) + 1, phase, "prefetch (posted)" if what == "prefetch" else what, name,
                     " + ".join(whole) or "-"))
    return Table(["#", "pass", "event", "unit", "gathered now"], rows, title=f"FSDP with prefetch, N = {world}")
