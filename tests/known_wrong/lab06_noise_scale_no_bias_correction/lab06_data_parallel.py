"""Known-wrong: takes |G_big|^2 for |G|^2, forgetting its bias tr(Sigma)/b_big (underestimates B_simple)."""
from solutions.lab06_data_parallel import *  # noqa: F401,F403


def noise_scale(g_small_sq, g_big_sq, b_small, b_big):
    trace = (g_small_sq - g_big_sq) / (1 / b_small - 1 / b_big)
    return g_big_sq, trace, trace / g_big_sq                     # BUG: g_big_sq is |G|^2 + trace / b_big
