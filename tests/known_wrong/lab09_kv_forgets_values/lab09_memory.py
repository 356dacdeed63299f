"""Known-wrong: the KV cache counted as keys only (no factor 2 for the values)."""
from solutions.lab09_memory import *  # noqa: F401,F403


def kv_cache_bytes(layers, heads, kv_heads, head_dim, tokens, batch, itemsize):
    if min(layers, heads, kv_heads, head_dim, batch, itemsize) < 1 or tokens < 0 or heads % kv_heads:
        raise ValueError("bad sizes")
    return layers * kv_heads * head_dim * tokens * batch * itemsize
