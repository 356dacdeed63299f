"""Where each rank sits on the dp × tp × pp grid, and the process groups of each dimension.

The whole lab numbers ranks as

    rank = pp_index · (dp · tp)  +  dp_index · tp  +  tp_index

tensor parallelism innermost: the tp ranks of a layer are consecutive, so on a cluster they share
one node and its fastest links (NVLink) — tp moves the most bytes (4 all-reduces of b·s·h elements
per layer per micro-batch). Data parallelism comes next (one gradient all-reduce per step), and
pipeline parallelism outermost (only point-to-point activations between neighbouring stages,
which tolerate the slowest links). This is the order of Megatron-LM (Narayanan et al. 2021) and of
PyTorch's ``init_device_mesh(device, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))``, whose
row-major layout gives exactly the formula above; `build_grid` uses it ("cuda" under NCCL, where
each rank owns its GPU, else "cpu").

Pure functions (no torch.distributed; Lab 11's one copy, which the planner imports): `coords`,
`rank_of`, `groups`, `nodes_spanned` (ranks fill nodes in order: node = rank // gpus_per_node),
`coord_of` (the same as a named `Coord`), `embedding_groups`.
On launched ranks: `build_grid` → `Grid`, holding this rank's coordinates and its groups.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from labkit.checks import check_count, check_int

__all__ = ["KINDS", "Coord", "coords", "coord_of", "rank_of", "groups", "embedding_groups", "check_grid", "Grid",
           "build_grid", "nodes_spanned"]

KINDS = ("dp", "tp", "pp")   # the grid's dimensions


class Coord(NamedTuple):
    """A rank's place on the grid: its index along data (dp), tensor (tp) and pipeline (pp)."""

    dp: int
    tp: int
    pp: int


def _check_sizes(fn: str, dp, tp, pp) -> tuple[int, int, int]:
    return (check_int(fn, "dp", dp, minimum=1), check_int(fn, "tp", tp, minimum=1),
            check_int(fn, "pp", pp, minimum=1))


# BEGIN SOLUTION (labkit's grid: it answers rank_coords and group_ranks (lab11_parallel3d))
def rank_of(coord, dp: int, tp: int, pp: int) -> int:
    """The rank at grid position ``coord`` = (dp_index, tp_index, pp_index), the inverse of `coords`:
    pp_index·(dp·tp) + dp_index·tp + tp_index."""
    dp, tp, pp = _check_sizes("rank_of", dp, tp, pp)
    if isinstance(coord, (str, bytes)) or not hasattr(coord, "__len__") or len(coord) != 3:
        raise TypeError(f"rank_of: coord must be (dp_index, tp_index, pp_index), got {coord!r}")
    d = check_int("rank_of", "dp_index", coord[0], minimum=0, maximum=dp - 1)
    t = check_int("rank_of", "tp_index", coord[1], minimum=0, maximum=tp - 1)
    p = check_int("rank_of", "pp_index", coord[2], minimum=0, maximum=pp - 1)
    return p * (dp * tp) + d * tp + t
# END SOLUTION


# BEGIN SOLUTION (lab11_parallel3d)
def coords(rank: int, dp: int, tp: int, pp: int) -> tuple[int, int, int]:
    """(dp_index, tp_index, pp_index) of ``rank`` on a dp × tp × pp grid (inverse of `rank_of`)."""
    dp, tp, pp = _check_sizes("coords", dp, tp, pp)
    rank = check_int("coords", "rank", rank, minimum=0, maximum=dp * tp * pp - 1)
    pp_index, rest = divmod(rank, dp * tp)
    dp_index, tp_index = divmod(rest, tp)
    return dp_index, tp_index, pp_index
# END SOLUTION


# BEGIN SOLUTION (lab11_parallel3d)
def groups(dp: int, tp: int, pp: int) -> dict[str, list[list[int]]]:
    """The communication groups of each kind, every rank in exactly one group of each kind:

    "tp": for each (pp_index, dp_index), in that order, the ranks tp_index = 0..tp-1 (consecutive);
    "dp": for each (pp_index, tp_index), the ranks dp_index = 0..dp-1 (stride tp);
    "pp": for each (dp_index, tp_index), the ranks pp_index = 0..pp-1 (stride dp·tp) — stage order.

    Within each kind the groups come in order of their smallest rank. These are the groups
    ``init_device_mesh(..., (pp, dp, tp))`` builds for its "tp", "dp" and "pp" dimensions."""
    dp, tp, pp = _check_sizes("groups", dp, tp, pp)
    check_count("groups", "dp·tp·pp", dp * tp * pp)
    r = lambda d, t, p: p * (dp * tp) + d * tp + t  # noqa: E731
    return {
        "dp": [[r(d, t, p) for d in range(dp)] for p in range(pp) for t in range(tp)],
        "tp": [[r(d, t, p) for t in range(tp)] for p in range(pp) for d in range(dp)],
        "pp": [[r(d, t, p) for p in range(pp)] for d in range(dp) for t in range(tp)],
    }
# END SOLUTION


def nodes_spanned(group, gpus_per_node: int) -> int:
    """Number of distinct nodes the ranks of ``group`` live on (rank r is on node r // gpus_per_node)."""
    g = check_int("nodes_spanned", "gpus_per_node", gpus_per_node, minimum=1)
    if isinstance(group, (str, bytes)) or not hasattr(group, "__iter__"):
        raise TypeError(f"nodes_spanned: group must be a sequence of ranks, got {type(group).__name__}")
    ranks = list(group)
    if not ranks:
        raise ValueError("nodes_spanned: group must hold at least one rank, got none")
    for k in ranks:
        check_int("nodes_spanned", "rank", k, minimum=0)
    return len({k // g for k in ranks})


# BEGIN SOLUTION (labkit's grid: it answers rank_coords (lab11_parallel3d))
def coord_of(rank: int, dp: int, tp: int, pp: int) -> Coord:
    """`coords` as a named `Coord` (c.dp, c.tp, c.pp)."""
    return Coord(*coords(rank, dp, tp, pp))
# END SOLUTION


def embedding_groups(dp: int, tp: int, pp: int) -> list[list[int]]:
    """Megatron's "embedding group" of each pipeline: [first-stage rank, last-stage rank], the two
    ranks that hold the tied token embedding / output layer. Empty when pp = 1 (both uses of the
    weight are on the same rank)."""
    if _check_sizes("embedding_groups", dp, tp, pp)[2] == 1:
        return []
    return [[g[0], g[-1]] for g in groups(dp, tp, pp)["pp"]]


def check_grid(fn: str, world: int, dp: int, tp: int, pp: int) -> tuple[int, int, int]:
    """One-line ValueError unless dp · tp · pp equals the number of launched ranks."""
    dp, tp, pp = _check_sizes(fn, dp, tp, pp)
    if dp * tp * pp != world:
        raise ValueError(f"{fn}: dp·tp·pp = {dp * tp * pp} but {world} ranks were launched "
                         f"(dp={dp}, tp={tp}, pp={pp})")
    return dp, tp, pp


@dataclass
class Grid:
    """This rank's view of the grid: sizes, its `Coord`, and the torch.distributed groups it belongs
    to (``embedding`` is None when pp = 1). ``mesh`` is PyTorch's DeviceMesh (dims pp, dp, tp)."""

    dp: int
    tp: int
    pp: int
    rank: int
    coord: Coord
    mesh: Any
    tp_group: Any
    dp_group: Any
    pp_group: Any
    embedding: Any = None
    pp_grad_group: Any = None   # under NCCL: the pipeline's gradients travel in a second group (executor)

    def ranks(self, dim: str) -> list[int]:
        """The global ranks of this rank's ``dim`` group ("dp", "tp", "pp" or "embedding")."""
        import torch.distributed as dist

        group = {"dp": self.dp_group, "tp": self.tp_group, "pp": self.pp_group, "embedding": self.embedding}[dim]
        return [] if group is None else sorted(dist.get_process_group_ranks(group))


def build_grid(dp: int, tp: int, pp: int, fn: str = "build_grid") -> Grid:
    """Called by every rank of an initialised default group (all must call it, same sizes):
    builds the DeviceMesh and the embedding groups and returns this rank's `Grid`."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():
        raise RuntimeError(f"{fn}: no process group; run inside labkit.dist.launch (or torchrun)")
    dp, tp, pp = check_grid(fn, dist.get_world_size(), dp, tp, pp)
    rank = dist.get_rank()
    from labkit.dist import device
    from labkit.pipeline.executor import ordered_p2p

    mesh = init_device_mesh(device().type, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    embedding = pp_grad = None
    for ranks in embedding_groups(dp, tp, pp):   # every rank takes part in creating every group
        g = dist.new_group(ranks)
        if rank in ranks:
            embedding = g
    for ranks in groups(dp, tp, pp)["pp"] if ordered_p2p() and pp > 1 else []:
        g = dist.new_group(ranks)
        if rank in ranks:
            pp_grad = g
    return Grid(dp, tp, pp, rank, coord_of(rank, dp, tp, pp), mesh, mesh["tp"].get_group(),
                mesh["dp"].get_group(), mesh["pp"].get_group(), embedding, pp_grad)


def rank_coords(rank, dp, tp, pp):
    """(dp_index, tp_index, pp_index) of ``rank`` on a dp × tp × pp grid, in the rank order above.

    rank: int in 0 .. dp·tp·pp − 1; dp, tp, pp: ints >= 1. Returns a tuple of three ints.
    Example: dp=2, tp=2, pp=2: rank 5 -> (0, 1, 1) (5 = 1·4 + 0·2 + 1).
    """
    # BEGIN SOLUTION
    # HINT: peel the coordinates off with divmod, innermost first: tp varies fastest, then dp, and pp
    # HINT: slowest.
    rest, tp_index = divmod(rank, tp)
    pp_index, dp_index = divmod(rest, dp)
    return dp_index, tp_index, pp_index
    # END SOLUTION


def group_ranks(rank, kind, dp, tp, pp):
    """The ranks of ``rank``'s ``kind`` group, in increasing order (``rank`` itself included).

    kind: "dp" (the ranks that differ from ``rank`` only in dp_index: they hold the same
    parameters and all-reduce their gradients), "tp" (differ only in tp_index: they split each
    layer's matrices) or "pp" (differ only in pp_index: the stages of one pipeline).
    Returns a list of ints. Example: dp=2, tp=2, pp=2, rank 5: "dp" -> [5, 7], "tp" -> [4, 5],
    "pp" -> [1, 5].
    """
    # BEGIN SOLUTION
    # HINT: find the rank's coordinates, then vary only the one its group spans (range over that
    # HINT: dimension) and map each coordinate back to a rank with the order above.
    d, t, p = rank_coords(rank, dp, tp, pp)
    if kind == "dp":
        return [p * dp * tp + i * tp + t for i in range(dp)]
    if kind == "tp":
        return [p * dp * tp + d * tp + i for i in range(tp)]
    if kind == "pp":
        return [i * dp * tp + d * tp + t for i in range(pp)]
    raise ValueError(f"group_ranks: kind must be 'dp', 'tp' or 'pp', got {kind!r}")
    # END SOLUTION
