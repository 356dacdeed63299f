"""Known-wrong: dead code elimination that looks only at users, so an unused in-place op (y.add_(1),
torch.relu_(z)) is removed and the output changes."""
from solutions.lab13_compilers import copy  # noqa: F401


def dead_code_elimination(gm):
    gm = copy.deepcopy(gm)
    for node in reversed(list(gm.graph.nodes)):
        if node.op not in ("placeholder", "output") and not node.users:
            gm.graph.erase_node(node)
    gm.recompile()
    return gm
