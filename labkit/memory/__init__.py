"""Memory (Lab 09): where a training step's bytes go, and the ways to need fewer of them.

    estimate.py        closed forms: model-state bytes per parameter; activations per layer
                       (Korthikanti et al. 2022) and our GPT's saved activations, exactly
    tracker.py         MemoryTracker: every tensor storage a step allocates and frees, by category
    activation_checkpointing.py
                       activation checkpointing by hand (Chen et al. 2016): segments recomputed,
                       RNG restored; exact peak bytes (S + k + 2)·a vs torch.utils.checkpoint
    recompute.py       selective (attention core) and full recomputation of the GPT
    policy.py          which activations to keep under a byte budget (0/1 knapsack), measured
                       under PyTorch's selective activation checkpointing
    accumulation.py    gradient accumulation: micro-batches with loss/n; peak = c0 + m·c1 exactly
    mixed_precision.py fp32 master weights + Adam (16 bytes/param, measured), dynamic loss scaling
                       (step for step torch.amp.GradScaler), fp16 underflow, bf16 autocast
    offload.py         OffloadedAdam: Adam's states on a slower tier (pinned host memory or an
                       mmap'd file); T_step = bytes moved / bandwidth + T_update, measured
    activation_offload.py  saved activations to a slower tier (saved_tensors_hooks) and back: bytes
                       moved = the saved-activation bytes exactly; the fast tier's drop, measured
    wall.py            the memory wall: published models' 16·Ψ bytes against the largest device of
                       each year, and both growth rates
    quantize.py        symmetric absmax int8/int4 per tensor/channel/group, packed bytes, error
                       <= s/2; straight-through fake quantization: QAT against PTQ
"""
from labkit.memory.estimate import activation_bytes_per_layer, model_state_bytes_per_param
from labkit.memory.tracker import ActivationPeakTracker, MemoryTracker

__all__ = ["MemoryTracker", "ActivationPeakTracker", "activation_bytes_per_layer", "model_state_bytes_per_param"]
