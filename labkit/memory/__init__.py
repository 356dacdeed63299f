"""Memory (Lab 09): where a training step's bytes go, and the ways to need fewer of them.

    estimate.py        closed forms: model-state bytes per parameter; activations per layer
                       (Korthikanti et al. 2022) and our GPT's saved activations, exactly
    tracker.py         MemoryTracker: every tensor storage a step allocates and frees, by category
    checkpointing.py   activation checkpointing by hand (Chen et al. 2016): segments recomputed,
                       RNG restored; exact peak bytes (S + k + 2)·a vs torch.utils.checkpoint
    recompute.py       selective (attention core) and full recomputation of the GPT
    accumulation.py    gradient accumulation: micro-batches with loss/n; peak = c0 + m·c1 exactly
"""
