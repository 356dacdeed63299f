"""Small models whose torch.fx graphs exercise each pass: for the notebook and for grading.

``build(case) -> GraphModule`` traces one of `CASES` (buffers are traced as ``get_attr`` nodes, so
constant folding has something to fold); ``inputs(case, seed) -> list of tensors`` draws its
inputs; ``run(gm, args, seed)`` calls it with torch's RNG seeded first (so graphs with random
ops give comparable outputs); ``summary(gm)`` lists its nodes as (op, target) strings.
"""
from __future__ import annotations

import torch
from torch import fx, nn

from labkit.checks import check_int


class BufferTracer(fx.Tracer):
    """Records buffer reads as ``get_attr`` nodes (plain symbolic_trace evaluates buffer-only
    expressions at trace time, leaving nothing to fold)."""

    proxy_buffer_attributes = True


# ---- dead code ------------------------------------------------------------------------------------
class DeadChain(nn.Module):
    """A dead chain of five nodes, a dead matmul, and an unused input."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.scale = nn.Parameter(torch.randn(8, generator=torch.Generator().manual_seed(1)))

    def forward(self, x, unused):
        dead = torch.tanh(self.lin(x)).exp() * self.scale
        _ = dead.sum()
        y = torch.relu(x) + 1
        _ = x.t() @ y
        return y * 2


class InPlace(nn.Module):
    """Results nobody reads, but ops that write into a tensor the output uses: they must stay."""

    def forward(self, x):
        y = x * 2
        y.add_(1)                       # unused result, but it changes y
        z = torch.sigmoid(x)
        torch.relu_(z)                  # likewise
        _ = torch.cos(x)                # truly dead
        return y + z


# ---- constants ------------------------------------------------------------------------------------
class FrozenAdapter(nn.Module):
    """A frozen base weight plus a frozen low-rank update (buffers): W + A·B depends on constants
    only; the trainable bias does not."""

    def __init__(self, d: int = 16, r: int = 4):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.register_buffer("W", torch.randn(d, d, generator=g))
        self.register_buffer("A", torch.randn(d, r, generator=g) * 0.1)
        self.register_buffer("B", torch.randn(r, d, generator=g) * 0.1)
        self.bias = nn.Parameter(torch.randn(d, generator=g))

    def forward(self, x):
        w = self.W + self.A @ self.B
        return x @ w.t() + self.bias * 2


class MixedConstants(nn.Module):
    """A buffer (constant) and a trainable parameter (not constant: folding it would freeze it)."""

    def __init__(self, d: int = 4):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.w = nn.Parameter(torch.randn(d, generator=g))
        self.register_buffer("s", torch.randn(d, generator=g))

    def forward(self, x):
        return x * (self.w * 2) + (self.s * 0.5).exp()


# ---- repeated subexpressions ---------------------------------------------------------------------
class Repeats(nn.Module):
    """The same computation written twice, several ways."""

    def forward(self, x):
        a, b = x + 1, x + 1
        c, d = torch.relu(x), torch.relu(x)
        e, f = torch.cumsum(x, dim=0), torch.cumsum(x, dim=0)
        return a * b + c * d + e - f


class LookAlikes(nn.Module):
    """Calls that look alike but differ in a keyword or a literal's type: none may be merged."""

    def forward(self, x, n):
        a = torch.cumsum(x, dim=0)
        b = torch.cumsum(x, dim=1)
        c = torch.clamp(x, min=0.0)
        d = torch.clamp(x, max=0.0)
        i = n + 1                        # n holds integers: int + 1 stays int64 ...
        j = n + 1.0                      # ... int + 1.0 becomes float32
        return a * b + c - d, i, j


class Draws(nn.Module):
    """Two random draws are two different numbers."""

    def forward(self, x):
        return x + torch.rand_like(x) - torch.rand_like(x)


CASES = {"dead_chain": DeadChain, "in_place": InPlace, "frozen_adapter": FrozenAdapter,
         "mixed_constants": MixedConstants, "repeats": Repeats, "look_alikes": LookAlikes, "draws": Draws}
SHAPES = {"dead_chain": [(4, 8), (3,)], "in_place": [(5, 6)], "frozen_adapter": [(3, 16)],
          "mixed_constants": [(2, 4)], "repeats": [(4, 5)], "look_alikes": [(4, 4), "int"], "draws": [(3, 3)]}
FOR_PASS = {"dead_code_elimination": ("dead_chain", "in_place", "repeats"),
            "constant_folding": ("frozen_adapter", "mixed_constants", "dead_chain"),
            "common_subexpression_elimination": ("repeats", "look_alikes", "draws", "in_place")}


def build(case: str) -> fx.GraphModule:
    """The traced GraphModule of ``CASES[case]`` (weights fixed by their own seeds)."""
    if case not in CASES:
        raise ValueError(f"build: unknown case {case!r}; cases: {', '.join(CASES)}")
    model = CASES[case]()
    return fx.GraphModule(model, BufferTracer().trace(model))


def inputs(case: str, seed: int) -> list:
    """The case's inputs drawn from ``seed`` (float32; "int" inputs are int64 in 0..9)."""
    check_int("inputs", "seed", seed)
    g = torch.Generator().manual_seed(seed)
    out = []
    for shape in SHAPES[case]:
        out.append(torch.randint(0, 10, (4, 4), generator=g) if shape == "int" else torch.randn(shape, generator=g))
    return out


def run(gm, args: list, seed: int = 0):
    """``gm(*clones of args)`` with torch's global RNG seeded by ``seed`` (a tuple of outputs)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        out = gm(*[a.clone() for a in args])
    return out if isinstance(out, tuple) else (out,)


def summary(gm: fx.GraphModule) -> list[tuple[str, str]]:
    """(op, target) of every node, targets as strings (functions by their qualified name)."""
    def name(t):
        return t if isinstance(t, str) else f"{getattr(t, '__module__', '')}.{getattr(t, '__name__', repr(t))}"
    return [(n.op, name(n.target)) for n in gm.graph.nodes]
