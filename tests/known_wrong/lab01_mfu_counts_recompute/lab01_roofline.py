"""Known wrong: MFU counts the recomputed forward (8N per token), so MFU == HFU under checkpointing."""
from solutions.lab01_roofline import *  # noqa: F401,F403


def mfu_hfu(n_params, tokens, seconds, peak_flops, recompute_forward):
    flops = (8 if recompute_forward else 6) * n_params * tokens
    return flops / seconds / peak_flops, flops / seconds / peak_flops
