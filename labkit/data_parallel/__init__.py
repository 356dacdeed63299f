"""Data parallelism (Lab 06): every rank holds the whole model and a slice of the batch.

    buckets.py   which gradients are all-reduced together (PyTorch DDP's bucketing rule)
    ddp.py       DDP: a wrapper that all-reduces gradients from backward hooks, overlapping backward
"""
from labkit.data_parallel.buckets import assign_buckets
from labkit.data_parallel.ddp import DDP

__all__ = ["DDP", "assign_buckets"]
