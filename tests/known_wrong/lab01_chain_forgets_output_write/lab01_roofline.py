"""Known wrong: the fused chain forgets that the result y must be written (counts k+1 arrays)."""
from solutions.lab01_roofline import *  # noqa: F401,F403


def chain_intensity(k, fused, dtype_bytes=4):
    arrays = (k + 1) if fused else 3 * k
    return k / (arrays * dtype_bytes)
