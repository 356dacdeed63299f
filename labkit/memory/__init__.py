"""Memory (Lab 09): where a training step's bytes go.

    estimate.py   closed forms: bytes per parameter for model states, activations per layer
                  (Korthikanti et al. 2022), with tensor/sequence parallelism and recomputation
    tracker.py    MemoryTracker: every tensor storage a step allocates and frees, by category
"""
