"""Known-wrong: sqrt(C·M): forgets that a failure loses half an interval on average (the 2)."""
from solutions.lab12_fault_tolerance import math


def young_interval(checkpoint_s, mtbf_s):
    return math.sqrt(checkpoint_s * mtbf_s)
