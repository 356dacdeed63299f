"""Known-wrong: a CSE whose key leaves out the keyword arguments, so cumsum(x, dim=0) and
cumsum(x, dim=1) (and clamp(min=0) and clamp(max=0)) are merged."""
from solutions.lab13_compilers import copy, fx, has_side_effects, is_random, torch  # noqa: F401


def common_subexpression_elimination(gm):
    gm = copy.deepcopy(gm)
    seen = {}
    for node in list(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        if has_side_effects(node) or is_random(node):
            seen.clear()
            continue
        key = (node.op, node.target, tuple((type(a), a) for a in node.args))
        try:
            hash(key)
        except TypeError:
            continue
        if key in seen:
            node.replace_all_uses_with(seen[key])
            gm.graph.erase_node(node)
        else:
            seen[key] = node
    gm.recompile()
    return gm
