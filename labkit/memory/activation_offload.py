"""Activation offload: what autograd saves for backward, moved to a slower tier and brought back.

Optimizer offload (`offload`) moves Adam's states; the other large part of a step's memory is
the activations autograd keeps for backward (`estimate.gpt_saved_activation_bytes`). PyTorch
lets us intercept each one: inside ``torch.autograd.graph.saved_tensors_hooks(pack, unpack)``
every tensor an op saves goes through ``pack`` during forward, and whatever ``pack`` returned
goes through ``unpack`` when backward needs it. `ActivationOffload` packs by copying the tensor's
storage to a tier (`offload.Tier`: an mmap'd file on a CPU-only machine, pinned host memory
under CUDA) and unpacks by copying it back:

    with ActivationOffload(model, tier="mmap") as off:
        loss = model(tokens, targets)[1]        # saved activations go to the tier as they are made
    loss.backward()                             # ... and come back as backward reaches them
    off.bytes_to_tier, off.bytes_from_tier

- parameters and buffers (``keep``) stay where they are: they are on the device anyway;
- each storage is copied once, however many saved tensors view it, and restored once: the copy
  brought back is held until the last of those views has been unpacked;
- ``min_bytes`` leaves small tensors alone (a copy has a fixed cost).

So the bytes moved each way equal the saved-activation bytes counted in Lab 09, and at the end
of forward the fast tier holds exactly that much less (`FastTierTracker` counts only the fast
tier: storages on the compute device that are not file-backed). During backward each layer's
activations come back while that layer runs, so the step's peak falls by less.

On a GPU, PyTorch's ``torch.autograd.graph.save_on_cpu(pin_memory=True)`` does the same with
pinned host memory (it copies every saved tensor, parameters included); `compare_save_on_cpu`
measures both with the CUDA allocator.

**Time.** The copies here run on the compute stream, so nothing hides: the step takes
bytes_to/B_to + bytes_from/B_from longer (`time_model`, with B measured by `offload.tier_bandwidth`
in the same run). With the copies on a side stream, a layer's transfer hides when its compute
takes longer: FLOPs_layer / F ≥ saved_bytes_layer / B (`layer_hides`). A transformer layer does
about 24·b·s·h² FLOPs for about 32·b·s·h bytes saved (16-bit), so it hides once h ≳ 1.3·F/B.
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import _disable_current_modes

from labkit.checks import check_int, check_real
from labkit.memory.offload import Tier, tier_bandwidth
from labkit.memory.tracker import MemoryTracker, _storage
from labkit.model import GPTConfig


CHUNK = 16 << 20       # bytes of tier memory allocated at a time
DEMO_CFG = GPTConfig(layers=4, hidden=64, heads=4, seq_len=32, vocab=128)    # measure_step's default


class ActivationOffload:
    """``saved_tensors_hooks`` that keep saved activations on a slower tier (module docstring).

    ``model``: its parameters and buffers are kept in place (or pass ``keep``, tensors to keep);
    ``tier``: "mmap" or "pinned" (`offload.Tier`); ``min_bytes``: smaller storages stay.
    ``bytes_to_tier`` / ``bytes_from_tier`` count the copies (bytes), ``storages`` how many went."""

    def __init__(self, model: torch.nn.Module | None = None, tier: str = "mmap", keep=(), min_bytes: int = 0,
                 path: str | None = None):
        fn = "ActivationOffload"
        self.min_bytes = check_int(fn, "min_bytes", min_bytes, minimum=0)
        kept = list(keep) + (list(model.parameters()) + list(model.buffers()) if model is not None else [])
        self._keep = {id(_storage(t)) for t in kept}
        self._tier_kind, self._path = tier, path
        self.tier = Tier(tier, path, fn)
        self.bytes_to_tier = self.bytes_from_tier = self.storages = 0
        self._copies: dict = {}          # (data_ptr, dtype) -> (weakref to the storage, tier buffer)
        self._uses: dict = {}            # id(tier buffer) -> saved views packed into it
        self._restored: dict = {}        # id(tier buffer) -> (storage brought back, views still to unpack)
        self._hooks = None
        self._chunks: list = []           # tier memory, kept from step to step
        self._at = (0, 0)                 # (chunk, byte) where the next piece starts

    def _alloc(self, nbytes: int) -> torch.Tensor:
        """``nbytes`` of the tier, carved from chunks of at least CHUNK bytes: one tier buffer (for
        the mmap tier one file) per chunk, not per saved tensor, reused by the next step (each
        `with` starts again at the first chunk: the last step's backward is over)."""
        k, used = self._at
        while k < len(self._chunks) and used + nbytes > self._chunks[k].numel():
            k, used = k + 1, 0
        if k == len(self._chunks):
            self._chunks.append(self.tier.empty(max(CHUNK, nbytes), torch.uint8))
        self._at = (k, used + -(-nbytes // 64) * 64)        # keep every piece 64-byte aligned
        return self._chunks[k][used:used + nbytes]

    # ------------------------------------------------------------------ the hooks
    def _pack(self, t: torch.Tensor):
        st = _storage(t)
        if id(st) in self._keep or st.nbytes() < max(1, self.min_bytes) or t.device.type == "meta":
            return t
        key = (st.data_ptr(), t.dtype)         # the same live storage: its Python object is the same
        ref, buf = self._copies.get(key, (None, None))
        if ref is None or ref() is not st:
            buf = self._alloc(st.nbytes())                   # the storage's bytes, as they are
            with _disable_current_modes():                   # a byte view of st: not for trackers
                raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st)
                buf.copy_(raw, non_blocking=True)
            if t.device.type == "cuda":
                torch.cuda.current_stream(t.device).synchronize()        # the tier copy is complete
            self._copies[key] = (weakref.ref(st), buf)
            self.bytes_to_tier += st.nbytes()
            self.storages += 1
        self._uses[id(buf)] = self._uses.get(id(buf), 0) + 1
        return (buf, t.dtype, t.device, t.size(), t.stride(), t.storage_offset())

    def still_on_device(self) -> int:
        """Bytes of copied storages that are still alive on the device (something besides autograd
        holds them): at the end of forward the fast tier has dropped bytes_to_tier minus this."""
        return sum(ref().nbytes() for ref, _ in self._copies.values() if ref() is not None)

    def _unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        buf, dtype, device, size, stride, offset = packed
        back, left = self._restored.get(id(buf), (None, self._uses[id(buf)]))
        if back is None:                                  # bring the storage back, once
            back = torch.empty(buf.numel(), dtype=torch.uint8, device=device)
            back.copy_(buf, non_blocking=True)
            self.bytes_from_tier += buf.numel()
        if left > 1:                                      # held until its last saved view is unpacked
            self._restored[id(buf)] = (back, left - 1)
        else:
            self._restored.pop(id(buf), None)
        out = torch.empty(0, dtype=dtype, device=device)
        return out.set_(back.untyped_storage(), offset, size, stride)

    # ------------------------------------------------------------------ context
    def __enter__(self):
        self._at, self._copies, self._uses, self._restored = (0, 0), {}, {}, {}
        self.bytes_to_tier = self.bytes_from_tier = self.storages = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)

    def close(self) -> None:
        """Free the tier (after backward)."""
        self._restored.clear()
        self._chunks = []
        self.tier.close()


class FastTierTracker(MemoryTracker):
    """`MemoryTracker` counting only the fast tier: storages on ``device`` that are not backed by a
    file (the mmap tier is; pinned host memory is not on a CUDA device)."""

    def __init__(self, model=None, optimizer=None, device: str | torch.device = "cpu"):
        super().__init__(model, optimizer)
        self.device_type = torch.device(device).type
        self.forward_end_bytes = 0

    def _add(self, t) -> None:
        if isinstance(t, torch.Tensor) and (t.device.type != self.device_type or
                                            getattr(_storage(t), "filename", None) is not None):
            return
        super()._add(t)


# ------------------------------------------------------------------------------ measured
@dataclass(frozen=True)
class OffloadStep:
    """One training step of `labkit.model.GPT` measured with and without activation offload."""

    saved_bytes: int              # closed form: estimate.gpt_saved_activation_bytes(...)["total"]
    to_tier: int                  # bytes copied to the tier
    from_tier: int                # bytes copied back
    held_elsewhere: int           # of those, bytes whose storage the caller still holds (token ids, targets)
    forward_end: dict             # fast-tier bytes live at the end of forward: {False: ..., True: ...}
    peak: dict                    # fast-tier peak of the step
    same_grads: bool              # gradients bit-identical with and without offload
    step_s: dict                  # step time (fastest of ``repeat``)


def _step(model, tokens, targets, offload: ActivationOffload | None, tracker: FastTierTracker | None):
    import contextlib

    ctx = offload if offload is not None else contextlib.nullcontext()
    with (tracker if tracker is not None else contextlib.nullcontext()):
        with ctx:
            loss = model(tokens, targets)[1]
        if tracker is not None:
            tracker.forward_end_bytes = tracker.current
        held = offload.still_on_device() if offload is not None else 0
        loss.backward()
    return held


def measure_step(cfg=None, batch_size: int = 4, dtype=torch.float32, tier: str = "mmap", device: str = "cpu",
                 repeat: int = 3) -> OffloadStep:
    """Forward + backward of ``GPT(cfg)`` with and without `ActivationOffload` (module docstring)."""
    from labkit.bench import median_time
    from labkit.memory.estimate import gpt_saved_activation_bytes
    from labkit.model import GPT, batch

    cfg = cfg or DEMO_CFG
    model = GPT(cfg, seed=0, dtype=dtype).to(device)
    tokens, targets = (t.to(device) for t in batch(cfg, batch_size, seed=0))
    grads, forward_end, peak, moved, times, held = {}, {}, {}, (0, 0), {}, 0
    for on in (False, True):
        model.zero_grad(set_to_none=True)
        tracker = FastTierTracker(model, device=device)
        off = ActivationOffload(model, tier=tier) if on else None
        held = _step(model, tokens, targets, off, tracker) or held
        grads[on] = [p.grad.clone() for p in model.parameters()]
        forward_end[on], peak[on] = tracker.forward_end_bytes, tracker.peak_bytes
        if off is not None:
            moved = (off.bytes_to_tier, off.bytes_from_tier)
            off.close()

        reused = ActivationOffload(model, tier=tier) if on else None     # its tier memory is reused

        def run(o=reused):
            model.zero_grad(set_to_none=True)
            _step(model, tokens, targets, o, None)
        run()                                                            # warm: the tier's pages exist
        times[on] = min(median_time(run, repeat=1, warmup=0) for _ in range(repeat))
        if reused is not None:
            reused.close()
    same = all(torch.equal(a, b) for a, b in zip(grads[False], grads[True]))
    saved = gpt_saved_activation_bytes(cfg, batch_size, dtype=dtype)["total"]
    return OffloadStep(saved, moved[0], moved[1], held, forward_end, peak, same, times)


def time_model(step: OffloadStep, tier: str = "mmap", device: str = "cpu") -> dict:
    """Predicted step time with offload = measured without + to/B_to + from/B_from (copies on the
    compute stream), B measured now with `offload.tier_bandwidth`; and the measured one."""
    to_bw, from_bw = tier_bandwidth(tier, nbytes=max(step.to_tier, 8 * 2**20), device=device, repeat=5)
    predicted = step.step_s[False] + step.to_tier / to_bw + step.from_tier / from_bw
    return {"to_bw": to_bw, "from_bw": from_bw, "predicted_s": predicted, "measured_s": step.step_s[True],
            "without_s": step.step_s[False]}


def layer_hides(hidden: int, seq: int, flops_per_s: float, bytes_per_s: float, heads: int = 1, mlp_ratio: int = 4,
                itemsize: int = 2, scores_saved: bool = False) -> tuple[float, float]:
    """(compute, copy) seconds per token for one transformer layer: the forward's matmul FLOPs
    2·(4 + 2r)·h² + 4·s·h at ``flops_per_s`` against the bytes it saves for backward at
    ``bytes_per_s``, (8 + 2r)·h·e + 4·e (Lab 09's count), plus a·s·e for the softmax output when
    ``scores_saved`` (unfused attention; a fused kernel keeps only its output and log-sum-exp).
    With the copies on a side stream they hide when the first is the larger."""
    h = check_int("layer_hides", "hidden", hidden, minimum=1)
    s = check_int("layer_hides", "seq", seq, minimum=1)
    f = check_real("layer_hides", "flops_per_s", flops_per_s, positive=True)
    b = check_real("layer_hides", "bytes_per_s", bytes_per_s, positive=True)
    r, e = mlp_ratio, itemsize
    flops = 2 * (4 + 2 * r) * h * h + 4 * s * h
    saved = (8 + 2 * r) * h * e + 4 * e + (heads * s * e if scores_saved else 0)
    return flops / f, saved / b


def compare_save_on_cpu(cfg=None, batch_size: int = 4) -> dict:
    """On a CUDA GPU: peak allocated bytes of a step plain, under PyTorch's
    ``save_on_cpu(pin_memory=True)``, and under ours with the pinned tier; and bytes ours moved."""
    from labkit.model import GPT, GPTConfig, batch

    if not torch.cuda.is_available():
        raise RuntimeError("compare_save_on_cpu needs a CUDA GPU (pinned host memory is the slow tier)")
    cfg = cfg or GPTConfig(layers=4, hidden=256, heads=4, seq_len=128, vocab=256)
    model = GPT(cfg, seed=0).to("cuda")
    tokens, targets = (t.to("cuda") for t in batch(cfg, batch_size, seed=0))
    out = {}
    for name in ("plain", "save_on_cpu", "ours"):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        if name == "plain":
            model(tokens, targets)[1].backward()
        elif name == "save_on_cpu":
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                loss = model(tokens, targets)[1]
            loss.backward()
        else:
            off = ActivationOffload(model, tier="pinned")
            with off:
                loss = model(tokens, targets)[1]
            loss.backward()
            out["ours_bytes"] = off.bytes_to_tier
            off.close()
        torch.cuda.synchronize()
        out[name] = (torch.cuda.max_memory_allocated(), time.perf_counter() - t0)
    return out


def save_on_cpu_report() -> str:
    """`compare_save_on_cpu` as printable lines on a CUDA GPU; elsewhere one line saying what it
    would show."""
    if not torch.cuda.is_available():
        return "No GPU here: on one, this compares torch's save_on_cpu with ours (peak, time)."
    r = compare_save_on_cpu()
    lines = [f"{name:>12}: peak {r[name][0] / 2**20:.1f} MiB, {r[name][1] * 1e3:.1f} ms"
             for name in ("plain", "save_on_cpu", "ours")]
    return "\n".join(lines + [f"ours moved {r['ours_bytes'] / 2**20:.1f} MiB to pinned memory"])
