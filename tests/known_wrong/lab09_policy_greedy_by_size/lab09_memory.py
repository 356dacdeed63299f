"""Known-wrong: keeps the smallest tensors first while they fit, whatever they cost to recompute."""
from solutions.lab09_memory import *  # noqa: F401,F403


def checkpoint_policy(sizes, costs, budget):
    keep, used = [], 0
    for i in sorted(range(len(sizes)), key=lambda i: sizes[i]):  # BUG: ignores costs
        if used + sizes[i] <= budget:
            keep.append(i)
            used += sizes[i]
    return sorted(keep)
