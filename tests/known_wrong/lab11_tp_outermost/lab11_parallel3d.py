"""Known-wrong: tp made the outermost dimension (rank = tp_i·(pp·dp) + pp_i·dp + dp_i): each tensor-
parallel group's ranks lie dp·pp apart, so on a real cluster they sit on different nodes."""


def rank_coords(rank, dp, tp, pp):
    tp_index, rest = divmod(rank, pp * dp)
    pp_index, dp_index = divmod(rest, dp)
    return dp_index, tp_index, pp_index


def group_ranks(rank, kind, dp, tp, pp):
    d, t, p = rank_coords(rank, dp, tp, pp)
    at = {"dp": lambda i: t * pp * dp + p * dp + i, "tp": lambda i: i * pp * dp + p * dp + d,
          "pp": lambda i: t * pp * dp + i * dp + d}[kind]
    return sorted(at(i) for i in range({"dp": dp, "tp": tp, "pp": pp}[kind]))
