"""Known-wrong: divides by the difference of the batch sizes instead of their reciprocals' difference."""
from solutions.lab06_data_parallel import *  # noqa: F401,F403


def noise_scale(g_small_sq, g_big_sq, b_small, b_big):
    g2 = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small)
    trace = (g_small_sq - g_big_sq) * (b_big - b_small)           # BUG: not / (1/b_small - 1/b_big)
    return g2, trace, trace / g2
