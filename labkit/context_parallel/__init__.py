"""Context parallelism (Lab 14): one attention layer over a sequence split across ranks.

    layout.py      which positions each rank holds: contiguous chunks, or zig-zag for causal balance
    attention.py   softmax attention a block of keys at a time (online softmax), forward and backward
    ring.py        ring_attention: key/value blocks passed round a ring, each hop overlapped with compute
    ulysses.py     ulysses_attention: all-to-all from sequence-split to head-split and back
    formulas.py    bytes per rank of each, and the work per rank under a causal mask
"""
from labkit.context_parallel.attention import reference_attention
from labkit.context_parallel.ring import ring_attention
from labkit.context_parallel.ulysses import ulysses_attention

__all__ = ["reference_attention", "ring_attention", "ulysses_attention"]
