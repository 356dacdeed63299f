"""Sharding specs on a device mesh (Lab 14): GSPMD-style placements, as PyTorch's DTensor has them.

    rules.py     placements "S(i)" / "R" / "P"; the rule for an einsum's output placement, per
                 mesh dimension (einsum_placement) and on a whole mesh (propagate)
    dtensor.py   DTensor's own choices on real gloo ranks: placements, collectives, bytes
                 (CommBytesMode: CommDebugMode plus the bytes each collective sends)
    mlp.py       an MLP under 1-D tensor parallelism and under 2-D sharding: bytes per rank,
                 measured and closed-form
"""
from labkit.sharding.rules import einsum_placement, propagate

__all__ = ["einsum_placement", "propagate"]
