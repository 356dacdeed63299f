"""Tensor parallelism (Lab 07): one layer's weights split across ranks (Megatron-LM).

    comm.py          the conjugate operators f and g (and sequence parallelism's pair), counted
    layers.py        ColumnParallelLinear, RowParallelLinear (from_linear: this rank's slice)
    blocks.py        the Megatron MLP and attention split by heads
    vocab.py         vocabulary-parallel embedding and cross-entropy (no full logits)
    parallelize.py   parallelize(GPT): the whole model, with optional sequence parallelism
    experts.py       expert parallelism: a mixture-of-experts layer, experts on different ranks
"""
from labkit.tensor_parallel.comm import count_collectives, copy_to_tp, reduce_from_tp
from labkit.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

# parallelize(GPT) is `labkit.tensor_parallel.parallelize.parallelize` (a re-export would hide its module)
__all__ = ["ColumnParallelLinear", "RowParallelLinear", "copy_to_tp", "count_collectives", "reduce_from_tp"]
