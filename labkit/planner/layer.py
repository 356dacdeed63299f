"""What one transformer layer (and the embedding and the logit layer) costs on one GPU for one
micro-batch: its GEMMs by shape, its memory-bound kernels by bytes, and its tensor-parallel
collectives — forward, backward and recomputation apart, as Megatron-LM runs them.

Notation: b micro-batch, s sequence, h hidden, a heads, d = h/a, f = mlp_ratio·h, V vocabulary,
t tensor-parallel ranks, T = b·s tokens; 16-bit elements (2 bytes), dropout masks 1 byte.

**GEMMs** of one layer, forward, per tensor-parallel rank (m × k times k × n; Megatron splits the
QKV and first MLP matrices by columns and the others by rows, heads whole on each rank):

    qkv     T × h   · h × 3h/t          scores   (b·a/t) × [s × d · d × s]
    proj    T × h/t · h/t × h            att·V    (b·a/t) × [s × s · s × d]
    fc1     T × h   · h × f/t            fc2      T × f/t · f/t × h

Each forward GEMM Y = X·W has two backward GEMMs: dX = dY·Wᵀ (m × n · n × k) and dW = Xᵀ·dY
(k × m · m × n), of the same FLOPs but other shapes — so their tiles and waves differ.

**Memory-bound kernels** (bytes moved, forward → backward; "rep" = replicated on every
tensor-parallel rank unless sequence parallelism splits it over t, Korthikanti et al. 2022):

    2 LayerNorms                     read x, write y: 2·4Th (rep)     → read x, dy, write dx: 2·6Th
    scale + mask + softmax (fused)   4·b·a·s²/t                       → 6·b·a·s²/t
    attention dropout                read, write, mask: 5·b·a·s²/t    → 5·b·a·s²/t
    2 bias + dropout + residual add  read 2 inputs, write, mask: 2·7Th (rep) → 2·5Th
    bias + GELU (fused)              read, write 2·2·Tf/t              → read x, dy, write dx 3·2·Tf/t

**Tensor-parallel collectives**: Megatron's g operator all-reduces T·h·2 bytes after the attention
projection and after fc2 (2 per layer forward); its f operator all-reduces the input gradients of
qkv and fc1 (2 backward). With sequence parallelism each becomes a reduce-scatter plus an
all-gather — the same bytes in a ring, so the same time. Megatron-LM from late 2021 on
(Korthikanti et al. 2022, "Reducing Activation Recomputation") overlaps the backward all-reduce
with the weight-gradient GEMM: then only max(0, all-reduce − dW GEMM) is exposed.

**Recomputation** repeats forward work in the backward pass: the whole layer ("full": its GEMMs,
kernels and 2 forward all-reduces), or the attention core ("selective": scores and att·V GEMMs,
softmax and dropout), or nothing ("none").

**Embedding** (first stage): gather T rows of h, add positions, dropout — about 13·T·h bytes
forward and 6·T·h backward, plus the all-reduce of the vocab-parallel lookup over tp.
**Head** (last stage): final LayerNorm, the logit GEMM T × h · h × V/t and its two backward
GEMMs, and the vocab-parallel cross entropy in float32 (about 16 bytes per logit forward, 12
backward: unfused conversions, max, exp-sum, and the gradient softmax − one-hot).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labkit.planner.device import Device, _gemm, memory_op_time
from labkit.planner.model import Model, recompute_name

B16 = 2   # bytes per 16-bit element


@dataclass(frozen=True)
class Gemm:
    """One GEMM: ``name``, shape (m, n, k) and ``batch`` (independent products side by side)."""

    name: str
    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.batch

    def backward(self) -> tuple["Gemm", "Gemm"]:
        """(dX = dY·Wᵀ, dW = Xᵀ·dY) for this Y = X·W."""
        return (Gemm(self.name + ".dX", self.m, self.k, self.n, self.batch),
                Gemm(self.name + ".dW", self.k, self.n, self.m, self.batch))


@dataclass(frozen=True)
class Kernel:
    """A memory-bound kernel: ``forward`` and ``backward`` bytes moved (module docstring)."""

    name: str
    forward: float
    backward: float


def layer_gemms(model: Model, micro_batch: int, tp: int) -> list[Gemm]:
    """The forward GEMMs of one layer on one tensor-parallel rank (module docstring)."""
    b, s, h, a = micro_batch, model.seq_len, model.hidden, model.heads
    T, d, f = b * s, h // a, model.ffn
    heads = b * a // tp
    return [Gemm("qkv", T, 3 * h // tp, h), Gemm("scores", s, s, d, heads), Gemm("att·V", s, d, s, heads),
            Gemm("proj", T, h, h // tp), Gemm("fc1", T, f // tp, h), Gemm("fc2", T, h, f // tp)]


def layer_kernels(model: Model, micro_batch: int, tp: int, sequence_parallel: bool = False,
                  element_bytes: int = 2) -> list[Kernel]:
    """The memory-bound kernels of one layer on one tensor-parallel rank, bytes (module docstring,
    for 16-bit elements; other ``element_bytes`` scale every count by element_bytes/2)."""
    b, s, h, a = micro_batch, model.seq_len, model.hidden, model.heads
    T, f = b * s, model.ffn
    w = element_bytes / B16
    rep = w / tp if sequence_parallel else w
    att = b * a * s * s / tp * w
    f_tp = f / tp * w
    return [Kernel("LayerNorm ×2", 2 * 4 * T * h * rep, 2 * 6 * T * h * rep),
            Kernel("softmax", 4 * att, 6 * att),
            Kernel("attention dropout", 5 * att, 5 * att),
            Kernel("bias+dropout+residual ×2", 2 * 7 * T * h * rep, 2 * 5 * T * h * rep),
            Kernel("bias+GELU", 2 * 2 * T * f_tp, 3 * 2 * T * f_tp)]


ATTENTION_CORE = ("scores", "att·V", "softmax", "attention dropout")   # what "selective" recomputes


@dataclass(frozen=True)
class PassTime:
    """Seconds of one pass (forward, backward or recomputation) of a piece of the model:
    ``gemm`` + ``elementwise`` + ``tp`` (the exposed part of its tensor-parallel collectives)."""

    gemm: float = 0.0
    elementwise: float = 0.0
    tp: float = 0.0

    @property
    def total(self) -> float:
        return self.gemm + self.elementwise + self.tp

    def __add__(self, other: "PassTime") -> "PassTime":
        return PassTime(self.gemm + other.gemm, self.elementwise + other.elementwise, self.tp + other.tp)

    def scaled(self, k: float) -> "PassTime":
        return PassTime(self.gemm * k, self.elementwise * k, self.tp * k)


@dataclass(frozen=True)
class PieceTime:
    """One micro-batch through a piece (a layer, the embedding, the head): ``forward``,
    ``backward`` and ``recompute`` `PassTime`s; ``total`` in seconds; ``detail`` {name: seconds}."""

    forward: PassTime
    backward: PassTime
    recompute: PassTime = PassTime()
    detail: dict = field(default_factory=dict, compare=False)

    @property
    def total(self) -> PassTime:
        return self.forward + self.backward + self.recompute

    @property
    def seconds(self) -> float:
        return self.total.total


def layer_time(model: Model, device: Device, micro_batch: int, tp: int, recompute="full",
               sequence_parallel: bool = False, tp_all_reduce: float = 0.0, tp_overlap: bool = False,
               element_bytes: int = 2) -> PieceTime:
    """One layer, one micro-batch, on one tensor-parallel rank (module docstring). ``tp_all_reduce``
    is the seconds of one all-reduce of T·h·2 bytes over the tp group (0 when tp = 1);
    ``tp_overlap`` hides each backward all-reduce behind its dW GEMM as far as that GEMM lasts;
    ``element_bytes`` per activation and weight element (2: 16-bit training)."""
    recompute = recompute_name("layer_time", recompute)
    detail: dict[str, float] = {}
    fwd_g = bwd_g = core_g = 0.0
    dw = {}
    for g in layer_gemms(model, micro_batch, tp):
        t = _gemm(device, g.m, g.n, g.k, g.batch, element_bytes).seconds
        dx, dwg = (_gemm(device, x.m, x.n, x.k, x.batch, element_bytes).seconds for x in g.backward())
        detail[g.name] = t
        detail[g.name + " backward"] = dx + dwg
        dw[g.name] = dwg
        fwd_g += t
        bwd_g += dx + dwg
        if g.name in ATTENTION_CORE:
            core_g += t
    fwd_e = bwd_e = core_e = 0.0
    for k in layer_kernels(model, micro_batch, tp, sequence_parallel, element_bytes):
        f = memory_op_time(device, k.forward)
        bk = memory_op_time(device, k.backward)
        detail[k.name] = f
        detail[k.name + " backward"] = bk
        fwd_e += f
        bwd_e += bk
        if k.name in ATTENTION_CORE:
            core_e += f
    fwd_tp = 2 * tp_all_reduce
    if tp_overlap:
        bwd_tp = sum(max(0.0, tp_all_reduce - dw[name]) for name in ("qkv", "fc1"))
    else:
        bwd_tp = 2 * tp_all_reduce
    forward = PassTime(fwd_g, fwd_e, fwd_tp)
    backward = PassTime(bwd_g, bwd_e, bwd_tp)
    if recompute == "full":
        again = forward
    elif recompute == "selective":
        again = PassTime(core_g, core_e, 0.0)
    else:
        again = PassTime()
    return PieceTime(forward, backward, again, detail)


def embedding_time(model: Model, device: Device, micro_batch: int, tp_all_reduce: float = 0.0,
                   element_bytes: int = 2) -> PieceTime:
    """The input embedding (first stage) for one micro-batch: gather, position add, dropout
    (13·T·h bytes forward, 6·T·h backward, 16-bit) and the vocab-parallel lookup's all-reduce over tp."""
    T, h = micro_batch * model.seq_len, model.hidden
    w = element_bytes / B16
    forward = PassTime(0.0, memory_op_time(device, 13 * T * h * w, kernels=3), tp_all_reduce)
    backward = PassTime(0.0, memory_op_time(device, 6 * T * h * w, kernels=2), 0.0)
    return PieceTime(forward, backward)


def head_time(model: Model, device: Device, micro_batch: int, tp: int, sequence_parallel: bool = False,
              element_bytes: int = 2) -> PieceTime:
    """The final LayerNorm, the logit GEMM (T × h · h × V/t) and the vocab-parallel cross entropy
    (float32, ~16 bytes per logit forward, 12 backward) for one micro-batch (last stage). The
    logit layer is not recomputed."""
    T, h = micro_batch * model.seq_len, model.hidden
    vocab = -(-model.vocab // tp)
    rep = (1 / tp if sequence_parallel else 1.0) * element_bytes / B16
    g = Gemm("logits", T, vocab, h)
    fwd_g = _gemm(device, g.m, g.n, g.k, 1, element_bytes).seconds
    bwd_g = sum(_gemm(device, x.m, x.n, x.k, 1, element_bytes).seconds for x in g.backward())
    logits = T * vocab
    fwd_e = memory_op_time(device, 4 * T * h * rep + 16 * logits, kernels=6)
    bwd_e = memory_op_time(device, 6 * T * h * rep + 12 * logits, kernels=4)
    return PieceTime(PassTime(fwd_g, fwd_e), PassTime(bwd_g, bwd_e),
                     detail={"logits": fwd_g, "logits backward": bwd_g, "cross entropy + final LN": fwd_e,
                             "cross entropy + final LN backward": bwd_e})


def optimizer_time(device: Device, params: float, bytes_per_param: float = 40.0) -> float:
    """The optimizer step on one GPU holding ``params`` parameters' states: memory-bound,
    ``bytes_per_param`` moved (mixed-precision Adam: fp16 grads to fp32, unscale and clip, read and
    write the fp32 weights, m and v, write the fp16 weights: about 40 bytes per parameter)."""
    return memory_op_time(device, params * bytes_per_param, kernels=8)


__all__ = ["Gemm", "Kernel", "PassTime", "PieceTime", "layer_gemms", "layer_kernels", "layer_time",
           "embedding_time", "head_time", "optimizer_time", "ATTENTION_CORE"]
