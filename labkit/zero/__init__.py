"""ZeRO and FSDP (Lab 10): shard the model states over the data-parallel ranks.

    formulas.py    model_state_bytes: per-rank bytes of parameters, gradients and optimizer states
    flat.py        FlatLayout: a group of parameters as one flat vector, padded and cut into N shards
    comm.py        the collectives (all-gather of shards, reduce-scatter of gradients), counted
    optimizer.py   ShardedOptimizer: ZeRO-1 (optimizer states sharded) and ZeRO-2 (+ gradients)
    fsdp.py        FSDP: ZeRO-3 (+ parameters), gathered unit by unit, freed after use; prefetch=True
                   posts the next unit's all-gather while the current one computes
    prefetch.py    when ZeRO-3's traffic hides: T_min tokens per rank, measured with and without prefetch
"""
from labkit.zero.formulas import model_state_bytes
from labkit.zero.fsdp import FSDP
from labkit.zero.optimizer import ShardedOptimizer

__all__ = ["FSDP", "ShardedOptimizer", "model_state_bytes"]
