"""Weight quantization to int8 and int4: symmetric absmax, per tensor, per channel or per group.

**Symmetric absmax quantization** with b bits maps a block of weights w to integer *codes*

    q_max = 2^(b-1) - 1                (127 for int8, 7 for int4)
    s     = clip · max|w| / q_max      the block's *scale* (clip = 1: the largest weight is ±q_max)
    q     = clamp(round(w / s), -q_max, q_max)
    ŵ     = q · s                      (dequantized)

Zero maps to code 0 exactly and the range is symmetric (code -2^(b-1) is never used). Rounding
to the nearest code errs by at most half a step, so for every weight inside the clip range

    |w − ŵ| ≤ s / 2                    (+ float32 rounding, at most 2^-23 · max|w|)

A *block* shares one scale. ``granularity``: "tensor" (one scale), "channel" (one per output
row of a Linear weight: an outlier row no longer inflates every other row's step) or "group"
(``group_size`` consecutive weights of a row, as GPTQ/AWQ-style int4 formats use, e.g. 128).

**Storage** (`nbytes`, exact): int8 codes 1 byte each; int4 codes packed two per byte — element
2i in the low nibble, element 2i+1 in the high nibble, each as a 4-bit two's complement number —
so ⌈numel/2⌉ bytes; plus one fp32 (or bf16) scale per block, 4 (or 2) bytes.

**Quantization-aware training** (QAT): `FakeQuant` quantizes and dequantizes in the forward pass,
and its backward is the *straight-through estimator* (Bengio, Léonard and Courville 2013): round()
has zero gradient almost everywhere, so backward pretends it is the identity — passing the
gradient where |w| lies inside the clip range and zero where the weight was clamped.
`qat_vs_ptq` fine-tunes a GPT through it and compares with post-training quantization (PTQ).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call

from labkit.checks import check_int, check_real
from labkit.model import GPT, GPTConfig, batch, parameter_count
from labkit.table import Table

GRANULARITIES = ("tensor", "channel", "group")
BITS = (4, 8)
SCALE_DTYPES = (torch.float32, torch.bfloat16)


@dataclass(frozen=True)
class Quantized:
    """A quantized tensor. ``codes``: int8 (bits 8, one per element) or uint8 (bits 4, two per
    byte, module docstring), row-major over ``shape``; ``scales``: (R, G) — R rows of blocks (1 for
    "tensor"), G blocks per row — each block ``block`` consecutive elements of the (R, numel/R) view."""

    codes: torch.Tensor
    scales: torch.Tensor
    shape: tuple
    bits: int
    granularity: str
    block: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def _layout(fn: str, w: torch.Tensor, granularity: str, group_size: int) -> tuple:
    """(R, G, block): the tensor viewed as R rows of G blocks of ``block`` elements."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"{fn}: granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
    n = w.numel()
    if granularity == "tensor":
        return 1, 1, n
    if w.dim() < 2:
        raise ValueError(f"{fn}: granularity {granularity!r} needs a tensor with >= 2 dims, got shape {tuple(w.shape)}")
    rows = w.shape[0]
    cols = n // rows
    if granularity == "channel":
        return rows, 1, cols
    if cols % group_size:
        raise ValueError(f"{fn}: group_size {group_size} must divide the {cols} elements of each row")
    return rows, cols // group_size, group_size


def _check_weight(fn: str, w) -> None:
    if not isinstance(w, torch.Tensor) or not w.is_floating_point():
        raise TypeError(f"{fn}: w must be a floating-point torch.Tensor, got "
                        f"{type(w).__name__ if not isinstance(w, torch.Tensor) else w.dtype}")
    if w.numel() == 0:
        raise ValueError(f"{fn}: w must have at least one element")
    bad = int((~torch.isfinite(w.detach())).sum())
    if bad:                              # one NaN or inf would make its block's scale (and codes) NaN
        raise ValueError(f"{fn}: w has {bad} NaN/inf value(s); absmax quantization needs finite weights")


def _scales(absmax: torch.Tensor, qmax: int, clip: float, scale_dtype: torch.dtype) -> torch.Tensor:
    """Per-block scale clip·absmax/qmax in ``scale_dtype``, rounded *up* if needed so that the
    largest weight inside the clip range still maps within ±qmax."""
    s = clip * absmax / qmax                                                 # (R, G) fp32
    if scale_dtype == torch.float32:
        return s
    low = s.to(scale_dtype)
    short = low.float() < s
    return torch.where(short, torch.nextafter(low, torch.full_like(low, math.inf)), low)


def quantize(w: torch.Tensor, bits: int, granularity: str = "tensor", group_size: int = 128,
             clip: float = 1.0, scale_dtype: torch.dtype = torch.float32) -> Quantized:
    """Symmetric absmax quantization of ``w`` to ``bits`` (8 or 4) bits (module docstring).

    ``clip`` in (0, 1] shrinks the range to clip·max|w| (weights beyond it saturate at ±q_max);
    ``group_size`` is used by "group" only and must divide each row (numel / shape[0] elements).
    """
    fn = "quantize"
    _check_weight(fn, w)
    bits = check_int(fn, "bits", bits)
    if bits not in BITS:
        raise ValueError(f"{fn}: bits must be 4 or 8, got {bits}")
    group_size = check_int(fn, "group_size", group_size, minimum=1)
    clip = check_real(fn, "clip", clip, positive=True)
    if clip > 1:
        raise ValueError(f"{fn}: clip must be in (0, 1], got {clip}")
    if scale_dtype not in SCALE_DTYPES:
        raise TypeError(f"{fn}: scale_dtype must be torch.float32 or torch.bfloat16, got {scale_dtype}")
    R, G, block = _layout(fn, w, granularity, group_size)
    qmax = 2 ** (bits - 1) - 1
    blocks = w.detach().float().reshape(R, G, block)                         # (R, G, block)
    scales = _scales(blocks.abs().amax(dim=-1), qmax, clip, scale_dtype)     # (R, G)
    s = scales.float().unsqueeze(-1)                                         # (R, G, 1)
    codes = torch.where(s > 0, torch.round(blocks / torch.where(s > 0, s, 1.0)), 0.0)
    codes = codes.clamp(-qmax, qmax).to(torch.int8).reshape(-1)              # (numel,)
    if bits == 4:
        codes = pack_int4(codes)
    return Quantized(codes, scales, tuple(w.shape), bits, granularity, block)


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """(n,) int8 codes in [-8, 7] → (⌈n/2⌉,) uint8: element 2i in the low nibble, 2i+1 in the high."""
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.int8 or codes.dim() != 1:
        raise TypeError(f"pack_int4: codes must be a 1-D int8 tensor, got "
                        f"{codes.dtype if isinstance(codes, torch.Tensor) else type(codes).__name__}")
    c = codes.to(torch.int16) & 0xF                                          # 4-bit two's complement
    if c.numel() % 2:
        c = torch.cat([c, c.new_zeros(1)])
    return (c[0::2] | (c[1::2] << 4)).to(torch.uint8)


def unpack_int4(packed: torch.Tensor, n: int) -> torch.Tensor:
    """The inverse of `pack_int4`: (n,) int8 codes."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8 or packed.dim() != 1:
        raise TypeError(f"unpack_int4: packed must be a 1-D uint8 tensor, got "
                        f"{packed.dtype if isinstance(packed, torch.Tensor) else type(packed).__name__}")
    n = check_int("unpack_int4", "n", n, minimum=0, maximum=2 * packed.numel())
    b = packed.to(torch.int16)
    nibbles = torch.stack([b & 0xF, (b >> 4) & 0xF], dim=1).reshape(-1)[:n]  # (n,)
    return (nibbles - 16 * (nibbles >= 8)).to(torch.int8)


def codes_of(q: Quantized) -> torch.Tensor:
    """The integer codes of ``q``, one int8 per element, shaped like the tensor."""
    flat = unpack_int4(q.codes, q.numel) if q.bits == 4 else q.codes
    return flat.reshape(q.shape)


def dequantize(q: Quantized) -> torch.Tensor:
    """ŵ = code · scale, fp32, shaped like the original tensor."""
    if not isinstance(q, Quantized):
        raise TypeError(f"dequantize: q must be a Quantized, got {type(q).__name__}")
    R, G = q.scales.shape
    c = codes_of(q).reshape(R, G, q.block).float()                           # (R, G, block)
    return (c * q.scales.float().unsqueeze(-1)).reshape(q.shape)


def nbytes(q: Quantized) -> int:
    """Bytes of the codes plus the scales (module docstring)."""
    if not isinstance(q, Quantized):
        raise TypeError(f"nbytes: q must be a Quantized, got {type(q).__name__}")
    return q.codes.numel() * q.codes.element_size() + q.scales.numel() * q.scales.element_size()


def clip_range(q: Quantized) -> torch.Tensor:
    """Largest magnitude each element's block represents, q_max · s, shaped like the tensor."""
    R, G = q.scales.shape
    top = (2 ** (q.bits - 1) - 1) * q.scales.float()                         # (R, G)
    return top.unsqueeze(-1).expand(R, G, q.block).reshape(q.shape)


# ---------------------------------------------------------------------------- fake quantization
class FakeQuant(torch.autograd.Function):
    """Forward: ``dequantize(quantize(w, ...))`` in w's dtype. Backward: the straight-through
    estimator — the gradient passes unchanged where |w| ≤ clip·max|w| of its block (inside the
    clip range), zero where the weight was clamped. Use ``FakeQuant.apply(w, bits, granularity, group_size, clip)``."""

    @staticmethod
    def forward(ctx, w, bits, granularity, group_size, clip):
        q = quantize(w, bits, granularity, group_size, clip)
        R, G = q.scales.shape
        blocks = w.detach().float().abs().reshape(R, G, q.block)             # (R, G, block)
        limit = clip * blocks.amax(dim=-1, keepdim=True)                     # (R, G, 1): the clip range
        ctx.save_for_backward((blocks <= limit).reshape(w.shape))
        return dequantize(q).to(w.dtype)

    @staticmethod
    def backward(ctx, grad):
        (inside,) = ctx.saved_tensors
        return grad * inside, None, None, None, None


def fake_quant(w: torch.Tensor, bits: int, granularity: str = "group", group_size: int = 128,
               clip: float = 1.0) -> torch.Tensor:
    """`FakeQuant` applied to ``w`` (differentiable with the straight-through estimator)."""
    return FakeQuant.apply(w, bits, granularity, group_size, clip)


# ---------------------------------------------------------------------------- the GPT, quantized
def linear_weights(model: nn.Module, head: bool = True) -> list:
    """Names of the weights of every ``nn.Linear`` of ``model``, and with ``head`` the GPT's LM head
    — a Linear in all but name: logits = x @ tok_emb.weightᵀ, the weight tied to the token
    embedding, one output channel per vocabulary row. Biases and LayerNorms stay in full precision."""
    names = [f"{name}.weight" for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if head and isinstance(model, GPT):
        names.append("tok_emb.weight")
    return names


@dataclass(frozen=True)
class QuantizedModel:
    """A copy of a model whose Linear weights hold their dequantized values (``model``); the bytes
    those weights take in full precision and quantized (`nbytes`, codes + scales)."""

    model: nn.Module
    bits: int
    granularity: str
    weights: int
    full_bytes: int
    quantized_bytes: int

    @property
    def saved_bytes(self) -> int:
        return self.full_bytes - self.quantized_bytes


def quantize_model(model: nn.Module, bits: int, granularity: str = "channel", group_size: int = 128,
                   clip: float = 1.0, head: bool = True) -> QuantizedModel:
    """Quantize every Linear weight (`linear_weights`) of a copy of ``model``: post-training
    quantization, simulated — the weights hold their dequantized values."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"quantize_model: model must be an nn.Module, got {type(model).__name__}")
    out = copy.deepcopy(model)
    params = dict(out.named_parameters())
    full = packed = count = 0
    with torch.no_grad():
        for name in linear_weights(out, head):
            w = params[name]
            q = quantize(w, bits, granularity, group_size, clip)
            w.copy_(dequantize(q))
            full += w.numel() * w.element_size()
            packed += nbytes(q)
            count += w.numel()
    return QuantizedModel(out, bits, granularity, count, full, packed)


def eval_loss(model: nn.Module, cfg: GPTConfig, batches: int = 4, batch_size: int = 16) -> float:
    """Mean loss of ``model`` over ``batches`` held-out batches (seeds 5000, 5001, ...)."""
    with torch.no_grad():
        return sum(float(model(*batch(cfg, batch_size, seed=5000 + i))[1]) for i in range(batches)) / batches


QUANT_CFG = GPTConfig(layers=2, hidden=64, heads=4, seq_len=32, vocab=128)   # the tables' default model


def train_gpt(cfg: GPTConfig, steps: int, lr: float = 3e-3, batch_size: int = 16, seed: int = 0) -> nn.Module:
    """``GPT(cfg, seed)`` after ``steps`` Adam steps on batches with seeds 0, 1, ... (a starting point)."""
    steps = check_int("train_gpt", "steps", steps, minimum=0)
    model = GPT(cfg, seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for i in range(steps):
        opt.zero_grad()
        model(*batch(cfg, batch_size, seed=i))[1].backward()
        opt.step()
    return model


def quantization_table(cfg: GPTConfig | None = None, train_steps: int = 200, bits=(8, 4),
                       granularities=GRANULARITIES, group_size: int = 32, model: nn.Module | None = None) -> Table:
    """A GPT trained for ``train_steps`` steps (or ``model``, a trained ``GPT(cfg)``), its Linear
    weights (`linear_weights`, LM head included) quantized each way: the bytes those weights take
    (codes + scales) and the held-out loss against the fp32 model."""
    cfg = cfg or QUANT_CFG
    model = model if model is not None else train_gpt(cfg, train_steps)
    base = eval_loss(model, cfg)
    full = sum(model.get_parameter(n).numel() * model.get_parameter(n).element_size() for n in linear_weights(model))
    rows = [("fp32", "-", full, 0, base, 0.0)]
    for b in bits:
        for g in granularities:
            qm = quantize_model(model, b, g, group_size)
            loss = eval_loss(qm.model, cfg)
            rows.append((f"int{b}", g, qm.quantized_bytes, qm.saved_bytes, loss, loss - base))
    return Table(["weights", "granularity", "bytes", "saved", "loss", "loss change"], rows,
                 formats={"loss": ".4f", "loss change": "+.4f"},
                 title=f"Linear weights of a {parameter_count(cfg)}-parameter GPT (group size {group_size})")


def _qat_loss(model: nn.Module, names: list, tokens, targets, bits, granularity, group_size, clip):
    params = dict(model.named_parameters())
    fake = {n: fake_quant(params[n], bits, granularity, group_size, clip) for n in names}
    return functional_call(model, fake, (tokens, targets))[1]


def qat_finetune(model: nn.Module, cfg: GPTConfig, steps: int, lr: float = 3e-4, bits: int = 4,
                 granularity: str = "group", group_size: int = 32, clip: float = 1.0, batch_size: int = 16,
                 fake: bool = True, seed: int = 0) -> nn.Module:
    """A copy of ``model`` fine-tuned for ``steps`` Adam steps (batches seeded 100000 + 1000·seed,
    ...) with its Linear weights fake-quantized in the forward pass (``fake=False``: plain
    fine-tuning, the control)."""
    steps = check_int("qat_finetune", "steps", steps, minimum=0)
    lr = check_real("qat_finetune", "lr", lr, positive=True)
    if not isinstance(model, GPT):
        raise TypeError(f"qat_finetune: model must be a labkit GPT, got {type(model).__name__}")
    out = copy.deepcopy(model)
    names = linear_weights(out)
    opt = torch.optim.Adam(out.parameters(), lr=lr)
    for i in range(steps):
        tokens, targets = batch(cfg, batch_size, seed=100000 + 1000 * check_int("qat_finetune", "seed", seed,
                                                                               minimum=0) + i)
        opt.zero_grad()
        if fake:
            loss = _qat_loss(out, names, tokens, targets, bits, granularity, group_size, clip)
        else:
            loss = out(tokens, targets)[1]
        loss.backward()
        opt.step()
    return out


@dataclass(frozen=True)
class QATResult:
    """Held-out losses: the fp32 start, its PTQ, the QAT model quantized, and the control (the
    start fine-tuned as long without fake quantization, then quantized)."""

    start: float
    ptq: float
    qat: float
    control_fp32: float
    control_ptq: float


def qat_vs_ptq(cfg: GPTConfig | None = None, train_steps: int = 200, qat_steps: int = 40, lr: float = 3e-4,
               bits: int = 4, granularity: str = "group", group_size: int = 32,
               start: nn.Module | None = None, seed: int = 0) -> QATResult:
    """Post-training quantization of a trained GPT (``start``, or ``train_gpt(cfg, train_steps)``)
    against ``qat_steps`` steps of quantization-aware fine-tuning from it, and the control, both
    fine-tuned on the batches of ``seed``."""
    cfg = cfg or QUANT_CFG
    start = start if start is not None else train_gpt(cfg, train_steps)
    q = lambda m: eval_loss(quantize_model(m, bits, granularity, group_size).model, cfg)   # noqa: E731
    qat = qat_finetune(start, cfg, qat_steps, lr, bits, granularity, group_size, seed=seed)
    control = qat_finetune(start, cfg, qat_steps, lr, bits, granularity, group_size, fake=False, seed=seed)
    return QATResult(eval_loss(start, cfg), q(start), q(qat), eval_loss(control, cfg), q(control))


def qat_seed_table(start: nn.Module, cfg: GPTConfig | None = None, seeds=range(5), qat_steps: int = 40,
                   **kwargs) -> Table:
    """`qat_vs_ptq` from one trained model ``start`` with the fine-tuning batches of each seed: the
    held-out losses of PTQ (the same for every seed), QAT and the control quantized, and
    QAT − control; the last row is the mean ± its standard error over the seeds."""
    seeds = list(seeds)
    if len(seeds) < 2:
        raise ValueError(f"qat_seed_table: need at least 2 seeds for a standard error, got {len(seeds)}")
    runs = [qat_vs_ptq(cfg, qat_steps=qat_steps, start=start, seed=s, **kwargs) for s in seeds]
    diffs = [r.qat - r.control_ptq for r in runs]
    mean = sum(diffs) / len(diffs)
    se = (sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) / len(diffs)) ** 0.5
    rows = [(s, r.ptq, r.qat, r.control_ptq, f"{d:+.4f}") for s, r, d in zip(seeds, runs, diffs)]
    rows.append(("mean", sum(r.ptq for r in runs) / len(runs), sum(r.qat for r in runs) / len(runs),
                 sum(r.control_ptq for r in runs) / len(runs), f"{mean:+.4f} ± {se:.4f}"))
    table = Table(["seed", "PTQ int4", "QAT int4", "control int4", "QAT - control"], rows,
                  formats={"PTQ int4": ".4f", "QAT int4": ".4f", "control int4": ".4f"},
                  title=f"{qat_steps} fine-tuning steps per seed; held-out loss of the int4 model "
                        f"(fp32 start {runs[0].start:.4f})")
    table.data = {"diffs": diffs, "mean": mean, "se": se, "runs": runs}
    return table
