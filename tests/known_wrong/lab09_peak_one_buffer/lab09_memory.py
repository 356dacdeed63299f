"""Known-wrong: the forward-only peak taken as the largest single activation, forgetting that a
layer's input is still alive while it writes its output."""
from solutions.lab09_memory import *  # noqa: F401,F403


def forward_only_peak(activation_bytes):
    a = list(activation_bytes)
    if not a:
        raise ValueError("empty")
    return max(a)
