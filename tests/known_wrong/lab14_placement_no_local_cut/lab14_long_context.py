"""Known-wrong: a cut operand meeting a replicated one is declared in need of communication, as
if the replicated operand could not cut itself locally (R with S(1) on a matmul gives S(1) free)."""
from solutions.lab14_long_context import *  # noqa: F401,F403
from solutions.lab14_long_context import einsum_placement

_right = einsum_placement            # the right rule (the reference answers' text comes first)


def einsum_placement(equation, a, b):
    if "R" in (a, b) and any(p.startswith("S(") for p in (a, b)):
        return None                                       # BUG: R can be cut for free
    return _right(equation, a, b)
