"""Known-wrong: mirror pairing, rank r with rank world - 1 - r. With an odd number of ranks the
middle one keeps its own copy, and the two ranks either side of the middle share a node."""
from solutions.lab12_fault_tolerance import *  # noqa: F401,F403


def peer_ranks(world, per_node):
    return [world - 1 - r for r in range(world)]                 # BUG: pairs the middle rank with itself
