"""The seven collective primitives as before/after states (what each one *means*).

``primitive_states(name, world_size, root=0) -> (before, after)``: for each rank
a list of cells; a cell is a frozenset of (rank, block) pairs — the input
blocks summed into it — or an empty frozenset for "nothing / unspecified".
Every rank starts with world_size blocks for scatter and reduce-scatter (one
per destination rank) and with one block otherwise. Tests check these states
against torch.distributed's own collectives.
"""
from __future__ import annotations

PRIMITIVES = ("broadcast", "scatter", "gather", "reduce", "all_gather", "reduce_scatter", "all_reduce")


def primitive_states(name: str, world_size: int, root: int = 0):
    """(before, after) per-rank cell lists for primitive ``name`` (see module doc)."""
    if name not in PRIMITIVES:
        raise ValueError(f"primitive_states: unknown primitive {name!r}; expected one of {', '.join(PRIMITIVES)}")
    n = world_size
    if not isinstance(n, int) or n < 1 or not 0 <= root < n:
        raise ValueError(f"primitive_states: need world_size >= 1 and 0 <= root < world_size, got {n}, {root}")
    one = lambda r, b=0: frozenset({(r, b)})  # noqa: E731
    empty = frozenset()
    if name in ("scatter", "reduce_scatter"):
        before = [[one(r, b) if (name == "reduce_scatter" or r == root) else empty for b in range(n)]
                  for r in range(n)]
    elif name == "broadcast":
        before = [[one(r) if r == root else empty] for r in range(n)]
    else:
        before = [[one(r)] for r in range(n)]
    everyone = frozenset((r, 0) for r in range(n))
    if name == "broadcast":
        after = [[one(root)] for _ in range(n)]
    elif name == "scatter":
        after = [[one(root, r)] for r in range(n)]
    elif name == "gather":
        after = [[one(q) for q in range(n)] if r == root else [empty] * n for r in range(n)]
    elif name == "reduce":
        after = [[everyone] if r == root else [empty] for r in range(n)]
    elif name == "all_gather":
        after = [[one(q) for q in range(n)] for _ in range(n)]
    elif name == "reduce_scatter":
        after = [[frozenset((q, r) for q in range(n))] for r in range(n)]
    else:
        after = [[everyone] for _ in range(n)]
    return before, after
