"""Known-wrong: constant folding that treats every parameter as a constant, so trainable weights are
frozen into buffers (the outputs still match today; training would stop updating them)."""
from solutions.lab13_compilers import copy, fx, has_side_effects, is_random, torch  # noqa: F401


def constant_folding(gm):
    gm = copy.deepcopy(gm)
    graph = gm.graph
    interp = fx.Interpreter(gm)
    values = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            value = interp.fetch_attr(node.target)
            if isinstance(value, torch.Tensor):
                values[node] = value.detach()
        elif node.op in ("call_function", "call_method") and not has_side_effects(node) and not is_random(node):
            if all(a in values for a in node.all_input_nodes):
                args = fx.node.map_arg(node.args, values.__getitem__)
                kwargs = fx.node.map_arg(node.kwargs, values.__getitem__)
                with torch.no_grad():
                    call = interp.call_function if node.op == "call_function" else interp.call_method
                    values[node] = call(node.target, args, kwargs)
    for k, node in enumerate([n for n in values if n.op != "get_attr" and isinstance(values[n], torch.Tensor)
                              and not all(u in values for u in n.users)]):
        name = f"_folded_{k}"
        gm.register_buffer(name, values[node].clone(), persistent=False)
        with graph.inserting_before(node):
            fetched = graph.get_attr(name)
        node.replace_all_uses_with(fetched)
    for node in reversed(list(graph.nodes)):
        if node in values and not node.users:
            graph.erase_node(node)
    gm.recompile()
    return gm
