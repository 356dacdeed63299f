"""Known-wrong: the branch and the print are gone, but the norm still leaves the graph as a Python
float (``.item()``): the values are right, Dynamo breaks the graph."""


def clip_without_breaks(x, max_norm):
    norm = x.norm().item()
    scale = max_norm / norm if norm > max_norm else 1.0
    return x * scale - (x * scale).mean()
