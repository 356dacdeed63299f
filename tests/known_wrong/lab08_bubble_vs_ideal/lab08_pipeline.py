"""Known wrong: the bubble relative to ideal compute, (p-1)/(v m), where the share of total time was asked."""
from fractions import Fraction

from solutions.lab08_pipeline import *  # noqa: F401,F403


def bubble_fraction(num_ranks, num_microbatches, virtual_stages=1):
    if min(num_ranks, num_microbatches, virtual_stages) < 1:
        raise ValueError("need positive arguments")
    return Fraction(num_ranks - 1, virtual_stages * num_microbatches)
