"""Known-wrong: the next rank keeps the copy, which with several ranks per node is on the same node:
losing that node loses both the snapshot and its copy."""
from solutions.lab12_fault_tolerance import *  # noqa: F401,F403


def peer_ranks(world, per_node):
    return [(r + 1) % world for r in range(world)]              # BUG: same node unless r ends its node
