"""Optimizer offload (the idea of ZeRO-Offload, Ren et al. 2021): Adam's states on a slower, bigger tier.

An accelerator's memory is small and fast; the host's is big and slow to reach. Adam's states
are the largest part of a training step's memory (with mixed precision 12 of the 16 bytes per
parameter) and are touched once per step, so `OffloadedAdam` keeps them on the *tier*:

    on the tier:   an fp32 copy of the parameters (the master, for 16-bit parameters), an fp32
                   gradient buffer, Adam's m and v in fp32            16 bytes per parameter
                   + 16-bit staging buffers for gradient and parameter  4 bytes, 16-bit params only
    each step:     gradients  device → tier      N · (bytes per gradient element)
                   Adam update on the tier (torch.optim.Adam's own math, on the tier's CPU)
                   parameters tier → device      N · (bytes per parameter element)

Only the 16-bit gradients and parameters cross the link, never m or v. The time model:

    T_step = bytes moved / bandwidth(tier) + T_update          (seconds)

with the bandwidth of a large copy to and from the tier and T_update (the Adam update on the
tier alone) both measured in the same run; `time_offloaded_step` checks it against a measured
step. The tiers:

    "pinned"   page-locked host memory (``torch.empty(..., pin_memory=True)``) under CUDA
               parameters: the copies are DMA transfers over PCIe/NVLink-C2C (H2D, D2H).
    "mmap"     a memory-mapped file (``torch.from_file(..., shared=True)``) in a private temporary
               directory that `close` removes: the same code path on a CPU-only machine, the
               "device" being ordinary memory and the tier the file's pages.

    with OffloadedAdam(model.parameters(), lr=1e-3, tier="mmap") as opt:
        loss.backward(); opt.step(); opt.zero_grad()

Results equal ``torch.optim.Adam`` (or `MixedPrecisionAdam` for 16-bit parameters) bit for bit:
the update is torch.optim.Adam running on the tier's tensors.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass

import torch

from labkit.bench import median_time
from labkit.checks import check_int, check_real
from labkit.memory.mixed_precision import MixedPrecisionAdam
from labkit.model import GPT, GPTConfig, batch, parameter_count
from labkit.optim import loss_from_closure
from labkit.table import Table

TIERS = ("mmap", "pinned")
FLOATS = (torch.float32, torch.float16, torch.bfloat16)


# ---------------------------------------------------------------------------- the tiers
def cuda_available() -> bool:
    """Whether the pinned tier can run for real (pinned memory needs a CUDA device)."""
    return torch.cuda.is_available()


def pinned_empty(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """``numel`` elements of page-locked host memory (what makes H2D/D2H copies asynchronous DMA)."""
    return torch.empty(numel, dtype=dtype, pin_memory=True)


class Tier:
    """Flat 1-D buffers on one tier; ``close()`` frees them (and removes the mmap tier's directory)."""

    def __init__(self, kind: str, path: str | None = None, fn: str = "Tier"):
        if kind not in TIERS:
            raise ValueError(f"{fn}: tier must be one of {', '.join(TIERS)}, got {kind!r}")
        self.kind, self.buffers, self.dir = kind, [], None
        if kind == "pinned" and not cuda_available():
            raise RuntimeError(f"{fn}: tier 'pinned' needs CUDA (pinned host memory); use tier='mmap'")
        if kind == "mmap":
            if path is not None and not os.path.isdir(path):
                raise ValueError(f"{fn}: path must be an existing directory, got {path!r}")
            self.dir = tempfile.mkdtemp(prefix="labkit-offload-", dir=path)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.dir, True) if self.dir else None

    def empty(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """A new buffer of ``numel`` elements (zeros on the mmap tier, uninitialised when pinned)."""
        if self.kind == "pinned":
            t = pinned_empty(numel, dtype)
        else:
            name = os.path.join(self.dir, f"buffer{len(self.buffers)}.bin")
            t = torch.from_file(name, shared=True, size=numel, dtype=dtype)    # a new file: zeros
        self.buffers.append(t)
        return t

    @property
    def nbytes(self) -> int:
        return sum(t.untyped_storage().nbytes() for t in self.buffers)

    def close(self) -> None:
        self.buffers = []
        if self._cleanup is not None:
            self._cleanup()                                   # rmtree once; later calls do nothing


def _wait(devices) -> None:
    """Block until copies queued on the CUDA devices among ``devices`` are done (CPU: nothing)."""
    for d in devices:
        if d.type == "cuda":
            torch.cuda.current_stream(d).synchronize()


# ---------------------------------------------------------------------------- the optimizer
class OffloadedAdam(torch.optim.Optimizer):
    """Adam whose states live on a slower tier (module docstring); one parameter group.

    ``step()`` = ``to_tier()`` (gradients device → tier), ``update()`` (torch.optim.Adam on the
    tier's fp32 copies), ``from_tier()`` (parameters tier → device). ``bytes_moved`` is what one
    step copies across, ``tier_bytes`` what the tier holds. Use it as a context manager or call
    ``close()`` to free the tier.
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 tier: str = "mmap", path: str | None = None):
        fn = "OffloadedAdam"
        lr, eps = check_real(fn, "lr", lr, positive=True), check_real(fn, "eps", eps, positive=True)
        weight_decay = check_real(fn, "weight_decay", weight_decay)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"{fn}: betas must be a pair of numbers, got {betas!r}")
        betas = tuple(check_real(fn, "betas", b) for b in betas)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        if len(self.param_groups) != 1:
            raise ValueError(f"{fn}: takes one parameter group, got {len(self.param_groups)}")
        self.params = self.param_groups[0]["params"]
        for p in self.params:
            if p.dtype not in FLOATS:
                raise TypeError(f"{fn}: parameters must be float32, float16 or bfloat16, got {p.dtype}")
        if len({p.dtype for p in self.params}) != 1:
            raise TypeError(f"{fn}: all parameters must share one dtype")
        self.tier = Tier(tier, path, fn)
        self._build()

    def _build(self) -> None:
        n = sum(p.numel() for p in self.params)
        dtype = self.params[0].dtype
        self.numel, self.devices = n, {p.device for p in self.params}
        flat = {k: self.tier.empty(n, torch.float32) for k in ("param", "grad", "exp_avg", "exp_avg_sq")}  # (N,) each
        flat["param"].copy_(torch.cat([p.detach().reshape(-1).cpu().float() for p in self.params]))
        flat["exp_avg"].zero_()
        flat["exp_avg_sq"].zero_()
        self._flat = flat
        if dtype == torch.float32:                       # the fp32 copies cross the link themselves
            self._stage_grad, self._stage_param = flat["grad"], flat["param"]
        else:                                            # 16-bit across the link, fp32 on the tier
            self._stage_grad, self._stage_param = self.tier.empty(n, dtype), self.tier.empty(n, dtype)
        self._grad_bytes = self._param_bytes = n * self.params[0].element_size()
        views = {k: _split(t, self.params) for k, t in flat.items()}
        self._views = {"stage_grad": _split(self._stage_grad, self.params),
                       "stage_param": _split(self._stage_param, self.params), **views}
        masters = views["param"]
        self._inner = torch.optim.Adam(masters, **{k: self.defaults[k] for k in ("lr", "betas", "eps", "weight_decay")})
        for p, m, ea, eas in zip(self.params, masters, views["exp_avg"], views["exp_avg_sq"]):
            # seed Adam's state with views of the tier, so its m and v live there (Adam keeps a
            # state it finds; it only creates one for a parameter whose state is empty)
            self._inner.state[m] = {"step": torch.tensor(0.0), "exp_avg": ea, "exp_avg_sq": eas}
            self.state[p] = {"master": m, "exp_avg": ea, "exp_avg_sq": eas}

    # -- the three parts of a step -----------------------------------------------------------
    @torch.no_grad()
    def to_tier(self) -> None:
        """Copy every gradient into the tier's staging buffer (D2H); a parameter without one is
        skipped by the update, as torch.optim.Adam skips it."""
        self._check_open()
        for p, g, master, g32 in zip(self.params, self._views["stage_grad"], self._views["param"],
                                     self._views["grad"]):
            if p.grad is not None:
                g.copy_(p.grad, non_blocking=True)
            master.grad = None if p.grad is None else g32   # Adam reads the tier's fp32 gradient
        _wait(self.devices)                              # the update reads them on the host

    @torch.no_grad()
    def update(self) -> None:
        """Adam on the tier: upcast staged 16-bit gradients, step the fp32 copies, round for the way back."""
        self._check_open()
        if self._stage_grad is not self._flat["grad"]:
            self._flat["grad"].copy_(self._stage_grad)
        group, inner = self.param_groups[0], self._inner.param_groups[0]
        for key in ("lr", "betas", "eps", "weight_decay"):
            inner[key] = group[key]
        self._inner.step()
        if self._stage_param is not self._flat["param"]:
            self._stage_param.copy_(self._flat["param"])   # round to the parameters' dtype

    @torch.no_grad()
    def from_tier(self) -> None:
        """Copy the updated parameters back to the device (H2D)."""
        for p, src in zip(self.params, self._views["stage_param"]):
            p.copy_(src, non_blocking=True)

    @torch.no_grad()
    def step(self, closure=None):
        """One offloaded Adam step: ``to_tier(); update(); from_tier()``."""
        loss = loss_from_closure(closure)
        self.to_tier()
        self.update()
        self.from_tier()
        return loss

    # -- bookkeeping -------------------------------------------------------------------------
    @property
    def bytes_moved(self) -> int:
        """Bytes one step copies across: gradients to the tier plus parameters back."""
        return self._grad_bytes + self._param_bytes

    @property
    def tier_bytes(self) -> int:
        """Bytes the tier holds: 16 per parameter, + 4 for 16-bit parameters' staging buffers."""
        return self.tier.nbytes

    def load_state_dict(self, state_dict) -> None:
        raise NotImplementedError("OffloadedAdam: load_state_dict is not supported")

    def _check_open(self) -> None:
        if self._inner is None:
            raise RuntimeError("OffloadedAdam: the optimizer is closed (its tier was freed)")

    def close(self) -> None:
        """Free the tier (the mmap tier's files and directory are removed)."""
        self._inner, self._flat, self._views = None, {}, {}
        self._stage_grad = self._stage_param = None
        self.state.clear()
        self.tier.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _split(flat: torch.Tensor, params) -> list:
    """Views of a flat (N,) buffer shaped like each of ``params`` in turn."""
    out, offset = [], 0
    for p in params:
        out.append(flat[offset:offset + p.numel()].view(p.shape))
        offset += p.numel()
    return out


# ---------------------------------------------------------------------------- the time model
def _fastest(*fns, repeat: int) -> list:
    """For each of ``fns``, the shortest of ``repeat`` single `median_time` samples, taken in turn
    (fn1, fn2, fn1, fn2, ...). On a shared machine another job's thread takes the core for a
    scheduler time slice (milliseconds) at random, so one sample of a 2 ms call reads 2 or ~8 ms;
    the shortest sample is the call's own cost, and interleaving lets all see the same machine."""
    samples = [[] for _ in fns]
    for _ in range(repeat):
        for out, fn in zip(samples, fns):
            out.append(median_time(fn, repeat=1, warmup=0))
    return [min(s) for s in samples]


def tier_bandwidth(tier: str = "mmap", nbytes: int = 32 * 2 ** 20, device: str | torch.device = "cpu",
                   path: str | None = None, repeat: int = 9) -> tuple:
    """(to-tier, from-tier) bandwidth in bytes/s: a copy of ``nbytes`` between ``device`` memory
    and a buffer on ``tier``, each direction the fastest of ``repeat`` timings (`_fastest`)."""
    fn = "tier_bandwidth"
    nbytes = check_int(fn, "nbytes", nbytes, minimum=4, maximum=1 << 36)
    repeat = check_int(fn, "repeat", repeat, minimum=1, maximum=1000)
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{fn}: path must be a folder path or None, got {type(path).__name__}")
    try:
        device = torch.device(device)
    except (TypeError, RuntimeError):
        raise ValueError(f"{fn}: device must name a torch device ('cpu', 'cuda:0'), got {device!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{fn}: device {device} asked for, but this machine has no CUDA GPU")
    tier_ = Tier(tier, path, fn)
    try:
        host = tier_.empty(nbytes // 4, torch.float32)
        host.fill_(1.0)                                   # touch every page before timing
        dev = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        sync = (lambda: _wait({dev.device}))             # noqa: E731
        to_tier = lambda: (host.copy_(dev, non_blocking=True), sync())      # noqa: E731
        from_tier = lambda: (dev.copy_(host, non_blocking=True), sync())    # noqa: E731
        to_tier(), from_tier()                                              # warm-up
        to_s, from_s = _fastest(to_tier, from_tier, repeat=repeat)
        return host.numel() * 4 / to_s, host.numel() * 4 / from_s
    finally:
        tier_.close()


@dataclass(frozen=True)
class OffloadTiming:
    """One offloaded step of a model, predicted and measured (bytes, bytes/s, seconds).

    ``predicted_s = grad_bytes / to_tier_bw + param_bytes / from_tier_bw + update_s``;
    ``adam_s``: the same update without offload, on the device, for comparison (torch.optim.Adam,
    or `MixedPrecisionAdam` for 16-bit parameters)."""

    tier: str
    params: int
    bytes_moved: int
    to_tier_bw: float
    from_tier_bw: float
    update_s: float
    predicted_s: float
    measured_s: float
    adam_s: float

    @property
    def ratio(self) -> float:
        """measured / predicted."""
        return self.measured_s / self.predicted_s

    @property
    def bandwidth(self) -> float:
        """The effective bandwidth of the transfers the model predicts (bytes/s)."""
        return self.bytes_moved / (self.predicted_s - self.update_s)


def time_offloaded_step(cfg: GPTConfig, tier: str = "mmap", dtype: torch.dtype = torch.float32,
                        device: str = "cpu", repeat: int = 9, path: str | None = None) -> OffloadTiming:
    """Build ``GPT(cfg)`` on ``device`` in ``dtype``, take one backward, and time an `OffloadedAdam`
    step against the module's time model (bandwidth and T_update measured in the same run)."""
    fn = "time_offloaded_step"
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"{fn}: cfg must be a GPTConfig, got {type(cfg).__name__}")
    repeat = check_int(fn, "repeat", repeat, minimum=1)
    model = GPT(cfg).to(device=device, dtype=dtype)
    tokens, targets = (t.to(device) for t in batch(cfg, 2))
    model(tokens, targets)[1].float().backward()
    with OffloadedAdam(model.parameters(), lr=1e-4, tier=tier, path=path) as opt:
        n = opt.numel
        to_bw, from_bw = tier_bandwidth(tier, nbytes=max(opt.bytes_moved, 32 * 2 ** 20), device=device,
                                        path=path, repeat=repeat)
        for _ in range(3):                   # warm-up: the first passes fault the tier's pages in
            opt.step()
        update_s, measured_s = _fastest(opt.update, opt.step, repeat=repeat)
        moved = opt.bytes_moved
    predicted = opt._grad_bytes / to_bw + opt._param_bytes / from_bw + update_s
    adam = (torch.optim.Adam(model.parameters(), lr=1e-4) if dtype == torch.float32
            else MixedPrecisionAdam(model.parameters(), lr=1e-4))
    adam.step()
    (adam_s,) = _fastest(adam.step, repeat=repeat)
    return OffloadTiming(tier, n, moved, to_bw, from_bw, update_s, predicted, measured_s, adam_s)


def offload_table(cfg: GPTConfig | None = None, tiers=None, dtype: torch.dtype = torch.float32,
                  repeat: int = 9) -> Table:
    """One row per tier that can run here (pinned needs CUDA): bytes moved per step, measured
    bandwidth, the time model's step time next to the measured one, and plain Adam's step."""
    cfg = cfg or GPTConfig(layers=2, hidden=128, heads=4, seq_len=32, vocab=256)
    tiers = tiers or (("mmap", "pinned") if cuda_available() else ("mmap",))
    rows = []
    for tier in tiers:
        device = "cuda" if tier == "pinned" else "cpu"
        t = time_offloaded_step(cfg, tier, dtype=dtype, device=device, repeat=repeat)
        rows.append((tier, t.bytes_moved, t.bandwidth / 1e9, t.predicted_s * 1e3, t.measured_s * 1e3,
                     t.adam_s * 1e3))
    return Table(["tier", "bytes moved/step", "GB/s", "predicted ms", "measured ms", "Adam in memory ms"], rows,
                 formats={"GB/s": ".2f", "predicted ms": ".2f", "measured ms": ".2f", "Adam in memory ms": ".2f"},
                 title=f"offloaded Adam, {parameter_count(cfg)} {str(dtype).replace('torch.', '')} parameters")
