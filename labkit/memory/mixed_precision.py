"""Mixed-precision training (Micikevicius et al. 2018, "Mixed Precision Training"), measured.

The recipe has three parts, each one here:

1. **An fp32 master copy of the weights.** The model computes in 16 bits (bf16 or fp16): its
   parameters and gradients are 2 bytes each. The optimizer keeps an fp32 copy of every weight
   (the *master weights*) plus Adam's two moments m and v in fp32, updates the master, and rounds
   it back into the 16-bit weight. Without the master, an update smaller than half a 16-bit ulp is
   rounded away: bf16 keeps 8 significant bits, so next to 1.0 any step below 2^-9 ≈ 0.002 is lost.
   Per parameter (bytes):

       16-bit parameter 2 + 16-bit gradient 2 + master 4 + m 4 + v 4  =  16

   The last 12 are the "optimizer states" K = 12 of the ZeRO paper. People often say Adam's
   memory is "3N × sizeof" (one copy each of weights, m and v); `MemoryTracker` on a real step
   counts 16 bytes per parameter, plus Adam's step counter (one 4-byte tensor per parameter
   *tensor* in torch.optim.Adam), and no more. `MixedPrecisionAdam` keeps its masters in
   ``optimizer.state[p]["master"]`` so that the tracker files them under "optimizer".

2. **Loss scaling.** fp16 has 5 exponent bits: its smallest subnormal is 2^-24 ≈ 6e-8 and its
   smallest normal 2^-14 ≈ 6e-5, so small gradients *underflow* (flush to zero or lose bits as
   subnormals). Multiplying the loss by S multiplies every gradient by S (backward is linear),
   lifting them into range; the optimizer divides by S again in fp32. Too large an S *overflows*
   (fp16's largest value is 65504): a gradient becomes inf, the step is skipped and S is cut.
   `DynamicLossScaler` does what ``torch.amp.GradScaler`` does, by hand: back off (S ×= 0.5) on
   inf/NaN and skip the step; after ``growth_interval`` clean steps in a row grow (S ×= 2).
   bf16 has fp32's 8 exponent bits, so bf16 training needs no scaling.

3. **Autocast.** ``torch.autocast`` runs matmuls in 16 bits and keeps the rest (losses,
   reductions) in fp32, on a model whose weights stay fp32; it casts each matmul's inputs, so the
   tensors autograd saves for backward are 16-bit too — measured by `train` (activation bytes).

    opt = MixedPrecisionAdam(model.parameters(), lr=1e-3)      # model in bf16 or fp16
    scaler = DynamicLossScaler()
    scaler.scale(model(tokens, targets)[1]).backward()
    scaler.step(opt); scaler.update(); opt.zero_grad()

`gradient_underflow` counts gradient entries that fp16 flushes to zero with and without a scale;
`train` runs one precision mode and measures loss, skipped steps, state bytes and activations;
`precision_table` puts the modes side by side.
"""
from __future__ import annotations

import copy
import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from labkit.checks import check_int, check_real
from labkit.memory.tracker import MemoryTracker
from labkit.model import GPT, GPTConfig, batch, parameter_count
from labkit.optim import loss_from_closure
from labkit.table import Table

HALF_TYPES = (torch.float16, torch.bfloat16)
MODES = ("fp32", "bf16-autocast", "bf16", "fp16", "fp16-scaled")


# ---------------------------------------------------------------------------- the optimizer
class MixedPrecisionAdam(torch.optim.Optimizer):
    """Adam on fp32 master weights for a model whose parameters are 16-bit (or fp32).

    ``step()``: upcast each gradient to fp32 (dividing by a loss scale if one was set), run
    ``torch.optim.Adam`` on the masters, round each master back into its parameter. States per
    parameter ``p`` in ``self.state[p]``: "master", "exp_avg" (m), "exp_avg_sq" (v) — all fp32,
    the parameter's shape — and Adam's "step" (a 0-dim fp32 tensor), all made with the optimizer
    (torch.optim.Adam makes m and v at its first step).

    It speaks ``torch.amp.GradScaler``'s protocol for optimizers that unscale inside their step
    (``_step_supports_amp_scaling``, as torch's fused Adam does): if ``grad_scale`` (the scale S,
    a tensor) and ``found_inf`` are set on it, gradients are divided by S in fp32 — so a gradient
    that needed S to stay above fp16's range never goes back to 16 bits — and a step with
    ``found_inf`` is skipped. ``load_state_dict`` is not supported.
    """

    _step_supports_amp_scaling = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        fn = "MixedPrecisionAdam"
        lr = check_real(fn, "lr", lr, positive=True)
        eps = check_real(fn, "eps", eps, positive=True)
        weight_decay = check_real(fn, "weight_decay", weight_decay)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"{fn}: betas must be a pair of numbers, got {betas!r}")
        betas = tuple(check_real(fn, "betas", b) for b in betas)
        if not all(0.0 <= b < 1.0 for b in betas) or weight_decay < 0:
            raise ValueError(f"{fn}: betas must lie in [0, 1) and weight_decay be >= 0, got {betas}, {weight_decay}")
        self._inner: torch.optim.Adam | None = None     # Adam over the masters, built with the first group
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters (as torch.optim does) and make their fp32 masters."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        masters = []
        for p in group["params"]:
            if p.dtype not in HALF_TYPES + (torch.float32,):
                raise TypeError(f"MixedPrecisionAdam: parameters must be float16, bfloat16 or float32, got {p.dtype}")
            master = p.detach().to(torch.float32, copy=True)              # same shape as p, 4 bytes/element
            self.state[p]["master"] = master
            masters.append(master)
        inner_group = {k: v for k, v in group.items() if k != "params"}
        inner_group["params"] = masters
        if self._inner is None:
            self._inner = torch.optim.Adam([inner_group])
        else:
            self._inner.add_param_group(inner_group)
        for p, master in zip(group["params"], masters):
            # Adam's states, made now rather than at the first step (Adam keeps a state it finds),
            # so that every fp32 byte is in self.state — where MemoryTracker looks — at all times
            state = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(master),
                     "exp_avg_sq": torch.zeros_like(master)}
            self._inner.state[master] = state
            self.state[p].update(state)

    def load_state_dict(self, state_dict) -> None:
        raise NotImplementedError("MixedPrecisionAdam: load_state_dict is not supported")

    def master(self, p: torch.Tensor) -> torch.Tensor:
        """The fp32 master copy of parameter ``p`` (same shape)."""
        return self.state[p]["master"]

    @torch.no_grad()
    def step(self, closure=None):
        """One Adam step on the masters; the 16-bit parameters get the rounded result."""
        loss = loss_from_closure(closure)
        found_inf = getattr(self, "found_inf", None)
        if found_inf is not None and float(found_inf) != 0.0:
            return loss                                    # overflow: skip, as GradScaler asks
        grad_scale = getattr(self, "grad_scale", None)
        for group, inner in zip(self.param_groups, self._inner.param_groups):
            for key in ("lr", "betas", "eps", "weight_decay"):   # a scheduler may have changed them
                inner[key] = group[key]
            for p, master in zip(group["params"], inner["params"]):
                if p.grad is None:
                    master.grad = None
                    continue
                g = p.grad.detach().float()                # upcast: a new fp32 tensor for 16-bit grads
                master.grad = g if grad_scale is None else g / grad_scale.to(g.device)
        self._inner.step()
        for group, inner in zip(self.param_groups, self._inner.param_groups):
            for p, master in zip(group["params"], inner["params"]):
                if master.grad is not None:
                    p.copy_(master)                        # round to nearest (even) in p's dtype
                    master.grad = None                     # free the fp32 gradient
        return loss


# ---------------------------------------------------------------------------- the loss scaler
@dataclass(frozen=True)
class ScalerStep:
    """One iteration of a loss scaler: the scale S used, and whether inf/NaN made it skip."""

    scale: float
    skipped: bool


class DynamicLossScaler:
    """Dynamic loss scaling, by hand; the same rule and arithmetic as ``torch.amp.GradScaler``.

    Per iteration: ``scale(loss).backward()``; ``step(optimizer)`` checks every gradient for
    inf/NaN (found_inf), divides the gradients by S and steps — or skips the step if found_inf;
    ``update()`` then sets S ← S·backoff_factor on found_inf (and restarts the count), else counts
    a clean step and, after ``growth_interval`` clean steps in a row, S ← S·growth_factor (if that
    stays finite in fp32). ``history`` holds one `ScalerStep` per iteration.
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000):
        fn = "DynamicLossScaler"
        self._scale = _fp32(check_real(fn, "init_scale", init_scale, positive=True))
        if not FP32_TINY <= self._scale <= FP32_MAX:          # 1e300 is inf in fp32, 1e-50 is 0
            raise ValueError(f"{fn}: init_scale must be a positive normal float32 ({FP32_TINY:.3g} .. "
                             f"{FP32_MAX:.3g}), got {init_scale!r}")
        self.growth_factor = check_real(fn, "growth_factor", growth_factor, positive=True)
        self.backoff_factor = check_real(fn, "backoff_factor", backoff_factor, positive=True)
        if self.growth_factor <= 1.0 or self.backoff_factor >= 1.0:
            raise ValueError(f"{fn}: need growth_factor > 1 and backoff_factor < 1, got "
                             f"{self.growth_factor}, {self.backoff_factor}")
        self.growth_interval = check_int(fn, "growth_interval", growth_interval, minimum=1)
        self.clean_steps = 0                  # clean steps in a row since the last change of S
        self.history: list[ScalerStep] = []
        self._found_inf: bool | None = None   # this iteration's verdict, None until checked
        self._unscaled = False
        self._stepped = False

    def get_scale(self) -> float:
        """The current scale S."""
        return self._scale

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """loss · S, in fp32 (as GradScaler: a 0-dim fp16 loss times an fp32 scale is fp32)."""
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"DynamicLossScaler.scale: loss must be a torch.Tensor, got {type(loss).__name__}")
        return loss * torch.tensor(self._scale, dtype=torch.float32, device=loss.device)

    @staticmethod
    def _grads(optimizer):
        return [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]

    def _check(self, optimizer) -> bool:
        if self._found_inf is None:
            self._found_inf = any(not bool(torch.isfinite(g).all()) for g in self._grads(optimizer))
        return self._found_inf

    @torch.no_grad()
    def unscale_(self, optimizer) -> bool:
        """Check the gradients for inf/NaN and divide them by S in place; return found_inf.

        Multiplying by 1/S is done in fp32 (exact: S is a power of two in normal use). An
        optimizer that unscales inside its step (`MixedPrecisionAdam`) is only checked here.
        """
        found = self._check(optimizer)
        if not self._unscaled and not getattr(optimizer, "_step_supports_amp_scaling", False):
            inv = _fp32(1.0 / self._scale)
            for g in self._grads(optimizer):
                g.copy_(g.float() * inv)              # in fp32, rounded once into g's dtype
        self._unscaled = True
        return found

    def step(self, optimizer) -> bool:
        """Unscale (if not done yet) and step unless found_inf; return True if it stepped.
        Once per iteration: a second call before `update` is refused (as GradScaler does)."""
        if self._stepped:
            raise RuntimeError("DynamicLossScaler.step: already called since the last update(); "
                               "call update() once after each step")
        self._stepped = True
        found = self.unscale_(optimizer)
        if found:
            return False
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            optimizer.grad_scale = torch.tensor(self._scale, dtype=torch.float32)
            optimizer.found_inf = torch.tensor(0.0)
            try:
                optimizer.step()
            finally:
                del optimizer.grad_scale, optimizer.found_inf
        else:
            optimizer.step()
        return True

    def _backed_off(self) -> float:
        """S · backoff_factor; RuntimeError if that falls below float32's smallest normal number."""
        backed = _fp32(self._scale * self.backoff_factor)
        if backed < FP32_TINY:
            raise RuntimeError(f"DynamicLossScaler.update: the scale would fall below float32's smallest "
                               f"normal number ({self._scale:.3g} x {self.backoff_factor:g}): the gradients "
                               f"are inf/NaN at every scale; check the loss and the inputs")
        return backed

    def update(self) -> None:
        """Back off or grow S from this iteration's verdict (class docstring); record history."""
        if self._found_inf is None:
            raise RuntimeError("DynamicLossScaler.update: call step(optimizer) (or unscale_) first")
        self.history.append(ScalerStep(self._scale, self._found_inf))
        if self._found_inf:
            self._scale = self._backed_off()
            self.clean_steps = 0
        else:
            self.clean_steps += 1
            if self.clean_steps == self.growth_interval:
                grown = _fp32(self._scale * self.growth_factor)
                if math.isfinite(grown):
                    self._scale = grown
                self.clean_steps = 0
        self._found_inf, self._unscaled, self._stepped = None, False, False


FP32_TINY, FP32_MAX = torch.finfo(torch.float32).tiny, torch.finfo(torch.float32).max


def _fp32(x: float) -> float:
    """x rounded to the nearest float32 (inf if out of range), as a Python float."""
    return float(torch.tensor(x, dtype=torch.float64).to(torch.float32))


# ---------------------------------------------------------------------------- measurements
@dataclass(frozen=True)
class LostUpdates:
    """One weight after ``steps`` Adam steps of size about ``lr``: updated in place in 16 bits
    (``without_master``), and with an fp32 master (``master``, and ``with_master`` its 16-bit copy)."""

    start: float
    lr: float
    steps: int
    without_master: float
    master: float
    with_master: float


def lost_updates(start: float = 1.0, lr: float = 1e-3, steps: int = 10,
                 dtype: torch.dtype = torch.bfloat16) -> LostUpdates:
    """Train one 16-bit weight ``start`` with gradient 1 for ``steps`` Adam steps, with torch's Adam
    directly on the 16-bit weight and with `MixedPrecisionAdam`. Adam's first steps move a weight by
    about ``lr``; when that is under half an ulp of the weight (bf16 at 1.0: 2^-9), rounding erases it."""
    fn = "lost_updates"
    start, lr = check_real(fn, "start", start), check_real(fn, "lr", lr, positive=True)
    steps = check_int(fn, "steps", steps, minimum=1)
    if dtype not in HALF_TYPES:
        raise TypeError(f"{fn}: dtype must be float16 or bfloat16, got {dtype}")
    plain = torch.nn.Parameter(torch.tensor([start], dtype=dtype))
    mixed = torch.nn.Parameter(torch.tensor([start], dtype=dtype))
    opts = torch.optim.Adam([plain], lr=lr), MixedPrecisionAdam([mixed], lr=lr)
    for _ in range(steps):
        for p, opt in zip((plain, mixed), opts):
            p.grad = torch.ones_like(p)
            opt.step()
    return LostUpdates(start, lr, steps, plain.item(), opts[1].master(mixed).item(), mixed.item())


@dataclass(frozen=True)
class Underflow:
    """Gradient entries of one fp16 backward against fp32 gradients of the same weights (counts).

    ``flushed_*``: entries nonzero in fp32 but 0 in fp16; ``subnormal_*``: nonzero fp16 entries
    below the dtype's smallest normal number (2^-14 for fp16: fewer than 11 significant bits left),
    both without and with the scale S; ``error_*``: relative error ‖g − g32‖ / ‖g32‖ of the
    (unscaled) gradient vector; ``overflowed``: the scaled backward produced inf/NaN."""

    entries: int
    nonzero_fp32: int
    scale: float
    flushed_unscaled: int
    flushed_scaled: int
    subnormal_unscaled: int
    subnormal_scaled: int
    overflowed: bool
    error_unscaled: float
    error_scaled: float

    @property
    def flushed_fraction_unscaled(self) -> float:
        return self.flushed_unscaled / self.nonzero_fp32

    @property
    def flushed_fraction_scaled(self) -> float:
        return self.flushed_scaled / self.nonzero_fp32


def _flat_grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.detach().flatten() for p in model.parameters() if p.grad is not None])


def gradient_underflow(model: torch.nn.Module, tokens: torch.Tensor, targets: torch.Tensor,
                       scale: float = 2.0 ** 16, dtype: torch.dtype = torch.float16,
                       autocast: bool = False, loss_factor: float = 1.0) -> Underflow:
    """Count the gradient entries a low-precision copy of ``model`` flushes to zero, unscaled and
    scaled by ``scale``.

    The copy is ``model`` cast to ``dtype`` (fp16, bf16 or fp32), or with ``autocast=True`` the
    fp32 model run under ``torch.autocast(dtype)``. The reference is the fp32 backward of the *same*
    weights (rounded to ``dtype`` first), so a flushed entry is the low-precision range's doing.
    "Subnormal" means below the smallest normal number of the gradients' dtype. ``loss_factor``
    multiplies the loss of both (e.g. 1/k when a step accumulates k micro-batches, each loss
    divided by k): it shifts every gradient down by the same factor, towards fp16's floor.
    """
    fn = "gradient_underflow"
    scale = check_real(fn, "scale", scale, positive=True)
    loss_factor = check_real(fn, "loss_factor", loss_factor, positive=True)
    if dtype not in HALF_TYPES + (torch.float32,):
        raise TypeError(f"{fn}: dtype must be float16, bfloat16 or float32, got {dtype}")
    low = copy.deepcopy(model).to(torch.float32 if autocast else dtype)
    ref = copy.deepcopy(low).to(torch.float32)
    (ref(tokens, targets)[1] * loss_factor).backward()
    g32 = _flat_grads(ref)                                                   # (N,) fp32
    context = (lambda: torch.autocast("cpu", dtype=dtype)) if autocast else nullcontext
    grads = {}
    for s in (1.0, scale):
        low.zero_grad(set_to_none=True)
        with context():
            loss = low(tokens, targets)[1] * loss_factor
        (loss * s).backward()
        grads[s] = _flat_grads(low)                                          # (N,), scaled by s
    nz = g32 != 0
    g1, gs = grads[1.0], grads[scale]
    tiny = torch.finfo(g1.dtype).tiny
    sub = lambda g: int(((g != 0) & (g.float().abs() < tiny)).sum())   # noqa: E731
    return Underflow(entries=g32.numel(), nonzero_fp32=int(nz.sum()), scale=scale,
                     flushed_unscaled=int((nz & (g1 == 0)).sum()), flushed_scaled=int((nz & (gs == 0)).sum()),
                     subnormal_unscaled=sub(g1), subnormal_scaled=sub(gs),
                     overflowed=not bool(torch.isfinite(gs).all()),
                     error_unscaled=_rel_error(g1.float(), g32), error_scaled=_rel_error(gs.float() / scale, g32))


def _rel_error(g: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(g - ref) / torch.linalg.vector_norm(ref))


@dataclass(frozen=True)
class PrecisionRun:
    """One training run in one precision ``mode`` (see `train`).

    ``losses``: the (unscaled) loss of each step; ``history``: the loss scaler's `ScalerStep`s
    (empty without scaling); ``state_bytes``: parameters + gradients + optimizer states live after
    the last step, by category, measured by `MemoryTracker`; ``activation_bytes``: bytes live at
    the end of the last forward that are not model states (what autograd saved, the logits, and
    under autocast its cached 16-bit copies of the weights); ``params``: parameter count,
    ``tensors``: parameter tensors; ``final_scale``: the loss scale after the run (None without)."""

    mode: str
    losses: list
    history: list
    state_bytes: dict
    activation_bytes: int
    params: int
    tensors: int
    final_model: torch.nn.Module
    final_scale: float | None

    @property
    def skipped(self) -> int:
        return sum(h.skipped for h in self.history)

    @property
    def state_bytes_per_param(self) -> float:
        return sum(self.state_bytes.values()) / self.params


def _setup(cfg: GPTConfig, mode: str, seed: int, lr: float, scaler_kwargs: dict):
    model = GPT(cfg, seed=seed)
    autocast, scaler = nullcontext(), None
    if mode == "fp32":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    elif mode == "bf16-autocast":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    else:
        model = model.to(torch.bfloat16 if mode == "bf16" else torch.float16)
        opt = MixedPrecisionAdam(model.parameters(), lr=lr)
        if mode == "fp16-scaled":
            scaler = DynamicLossScaler(**scaler_kwargs)
    return model, opt, autocast, scaler


def train(cfg: GPTConfig, mode: str, steps: int, lr: float = 3e-3, batch_size: int = 8, seed: int = 0,
          loss_factor: float = 1.0, **scaler_kwargs) -> PrecisionRun:
    """Train ``GPT(cfg, seed)`` for ``steps`` Adam steps in one precision mode; the last is measured.

    Modes: "fp32"; "bf16-autocast" (fp32 weights, matmuls under ``torch.autocast`` in bf16);
    "bf16" and "fp16" (16-bit weights and gradients, `MixedPrecisionAdam`, no loss scaling);
    "fp16-scaled" (as "fp16" plus `DynamicLossScaler(**scaler_kwargs)`). Step i trains on
    ``batch(cfg, batch_size, seed=1000 + i)``. The loss backpropagated is ``loss_factor`` times
    the mean cross-entropy (as with 1/k for k accumulated micro-batches); ``losses`` record the
    cross-entropy itself.
    """
    fn = "train"
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"{fn}: cfg must be a GPTConfig, got {type(cfg).__name__}")
    if mode not in MODES:
        raise ValueError(f"{fn}: mode must be one of {', '.join(MODES)}, got {mode!r}")
    steps = check_int(fn, "steps", steps, minimum=1)
    lr = check_real(fn, "lr", lr, positive=True)
    batch_size = check_int(fn, "batch_size", batch_size, minimum=1)
    loss_factor = check_real(fn, "loss_factor", loss_factor, positive=True)
    if scaler_kwargs and mode != "fp16-scaled":
        raise ValueError(f"{fn}: loss-scaler settings only apply to mode 'fp16-scaled'")
    model, opt, autocast, scaler = _setup(cfg, mode, seed, lr, scaler_kwargs)
    losses, activations, state = [], 0, {}
    for i in range(steps):
        tokens, targets = batch(cfg, batch_size, seed=1000 + i)
        last = i == steps - 1
        tracker = MemoryTracker(model, opt) if last else nullcontext()
        opt.zero_grad(set_to_none=True)
        with tracker:
            with autocast:
                loss = model(tokens, targets)[1]
                if last:
                    activations = tracker.live_by_category()["activations"]
            scaled = loss * loss_factor if loss_factor != 1.0 else loss
            (scaled if scaler is None else scaler.scale(scaled)).backward()
            if scaler is None:
                opt.step()
            else:
                scaler.step(opt)
                scaler.update()
            losses.append(float(loss.detach()))
            del loss, scaled
            if last:
                live = tracker.live_by_category()
                state = {k: live[k] for k in ("parameters", "gradients", "optimizer")}
    return PrecisionRun(mode, losses, list(scaler.history) if scaler else [], state, activations,
                        sum(p.numel() for p in model.parameters()), len(list(model.parameters())), model,
                        scaler.get_scale() if scaler else None)


def precision_table(cfg: GPTConfig | None = None, steps: int = 30, lr: float = 3e-3, batch_size: int = 8,
                    seed: int = 0, loss_factor: float = 2.0 ** -12) -> Table:
    """The modes of `train` side by side, all measured in this run: final loss, skipped steps, the
    fraction of gradient entries its precision flushes to zero (`gradient_underflow` on the final
    weights and a held-out batch, at the run's final loss scale), model-state bytes per parameter
    and activation bytes. The default ``loss_factor`` 2^-12 (a loss divided by 4096, as when 4096
    micro-batches are accumulated) pushes gradients towards fp16's floor; fp32 Adam does not care
    (its update is invariant to the gradients' scale), fp16 without a loss scale does."""
    cfg = cfg or GPTConfig(layers=2, hidden=64, heads=4, seq_len=32, vocab=128)
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"precision_table: cfg must be a GPTConfig, got {type(cfg).__name__}")
    probe = batch(cfg, batch_size, seed=999)
    rows = []
    for mode in MODES:
        run = train(cfg, mode, steps, lr=lr, batch_size=batch_size, seed=seed, loss_factor=loss_factor)
        weights = copy.deepcopy(run.final_model).float()
        dtype = {"fp32": torch.float32, "fp16": torch.float16, "fp16-scaled": torch.float16}.get(mode, torch.bfloat16)
        under = gradient_underflow(weights, *probe, scale=run.final_scale or 1.0, dtype=dtype,
                                   autocast=mode == "bf16-autocast", loss_factor=loss_factor)
        flushed = under.flushed_fraction_scaled if run.final_scale else under.flushed_fraction_unscaled
        rows.append((mode, run.losses[-1], run.skipped, flushed, run.state_bytes_per_param,
                     run.activation_bytes / 1024))
    return Table(["mode", "final loss", "skipped", "flushed grads", "state B/param", "activations KiB"], rows,
                 formats={"final loss": ".4f", "flushed grads": ".2e", "state B/param": ".3f",
                          "activations KiB": ".1f"},
                 title=f"{steps} Adam steps of a {parameter_count(cfg)}-parameter GPT, batch {batch_size}, "
                       f"loss x {_power_of_two(loss_factor)}")


def scale_history_table(cfg: GPTConfig | None = None, steps: int = 16, init_scale: float = 2.0 ** 24,
                        growth_interval: int = 3, batch_size: int = 8) -> Table:
    """An fp16 run whose initial loss scale is too large: it overflows, skips and backs off, then
    grows again after ``growth_interval`` clean steps. One row per step: S, skipped, loss."""
    cfg = cfg or GPTConfig(layers=2, hidden=64, heads=4, seq_len=32, vocab=128)
    run = train(cfg, "fp16-scaled", steps, batch_size=batch_size, init_scale=init_scale,
                growth_interval=growth_interval)
    rows = [(i, h.scale, "yes" if h.skipped else "", loss) for i, (h, loss) in enumerate(zip(run.history, run.losses))]
    return Table(["step", "scale S", "skipped", "loss"], rows, formats={"scale S": ".0f", "loss": ".4f"},
                 title=f"fp16 + dynamic loss scaling from S = {_power_of_two(init_scale)}: "
                       f"{run.skipped} steps skipped")


def _power_of_two(x: float) -> str:
    """"2^k" when x is a power of two, else x."""
    m, e = math.frexp(x)
    return f"2^{e - 1}" if m == 0.5 else f"{x:g}"


def scaler_run(make_scaler, autocast: bool, cfg: GPTConfig | None = None, steps: int = 10,
               init_scale: float = 2.0 ** 24, growth_interval: int = 3):
    """``steps`` fp16 steps of a small GPT under ``make_scaler(init_scale=, growth_interval=)``:
    fp16 autocast with torch.optim.Adam (``autocast=True``) or an fp16 model with
    `MixedPrecisionAdam`. Returns (the scale before each step, the parameters after each step)."""
    steps = check_int("scaler_run", "steps", steps, minimum=1, maximum=10_000)
    cfg = cfg or GPTConfig(layers=1, hidden=32, heads=2, seq_len=16, vocab=64)
    model = GPT(cfg)
    if autocast:
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    else:
        model = model.to(torch.float16)
        opt = MixedPrecisionAdam(model.parameters(), lr=1e-2)
    scaler = make_scaler(init_scale=init_scale, growth_interval=growth_interval)
    scales, params = [], []
    for step in range(steps):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
            loss = model(*batch(cfg, 4, seed=step))[1]
        scales.append(scaler.get_scale())
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        params.append([p.detach().clone() for p in model.parameters()])
    return scales, params


def gradscaler_table(steps: int = 10) -> Table:
    """Our `DynamicLossScaler` and ``torch.amp.GradScaler("cpu")`` on the same fp16 runs: do the
    scales agree at every step, and the parameters bit for bit?"""
    rows = []
    for autocast in (True, False):
        ours = scaler_run(DynamicLossScaler, autocast, steps=steps)
        theirs = scaler_run(lambda **kw: torch.amp.GradScaler("cpu", **kw), autocast, steps=steps)
        same_params = all(torch.equal(a, b) for x, y in zip(ours[1], theirs[1]) for a, b in zip(x, y))
        rows.append(("fp16 autocast + Adam" if autocast else "fp16 model + MixedPrecisionAdam",
                     " ".join(_power_of_two(s) for s in ours[0][:6]) + " ...", ours[0] == theirs[0], same_params))
    return Table(["run", "our scales", "same scales", "same parameters"], rows,
                 title=f"{steps} steps from S = 2^24, growth every 3 clean steps")

