"""Known-wrong: transactions counted from the bytes requested (active lanes × 4 / 128), as if every
access were coalesced: a strided or random warp is counted as 1."""
import math


def transactions(addresses, segment_bytes=128):
    active = sum(a is not None for a in addresses)
    return math.ceil(active * 4 / segment_bytes)
