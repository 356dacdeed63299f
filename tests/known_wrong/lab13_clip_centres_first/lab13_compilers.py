"""Known-wrong: one graph, no break, but it centres x before clipping, so the norm compared with
max_norm (and the scale) is the centred tensor's, not x's."""
import torch


def clip_without_breaks(x, max_norm):
    x = x - x.mean()
    norm = x.norm()
    return torch.where(norm > max_norm, x * (max_norm / norm), x)
