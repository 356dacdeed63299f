"""Three ways to differentiate one function: symbolic, numerical (finite differences), automatic.

**Symbolic.** The function is an expression tree (`Expr`); `diff` applies the derivative rules
(sum, product, quotient, chain) to the tree and returns a new tree, simplified as it is built
(``0·a → 0``, ``1·a → a``, ``a + 0 → a``, constants folded). The result is an exact formula,
but its size can grow much faster than the function's: the product rule copies both factors
into each of its two terms, and a tree cannot share a copy. This is *expression swell*
(`swell_table`, on the nested product ``f_{k+1} = 4·f_k·(1 − f_k)``, the example made famous by
Baydin et al., "Automatic differentiation in machine learning: a survey", JMLR 2018).

**Numerical.** ``(f(x + h) − f(x)) / h`` (forward) or ``(f(x + h) − f(x − h)) / 2h`` (central).
Two errors pull h in opposite directions: truncation, from the Taylor terms dropped, is
≈ h·|f''|/2 (forward, O(h)) or ≈ h²·|f'''|/6 (central, O(h²)); rounding, from subtracting two
nearly equal values each carrying a relative error ε = 2⁻⁵² ≈ 2.2e-16, is ≈ ε·|f|/h (O(ε/h)).
Their sum is smallest near h ≈ √ε ≈ 1.5e-8 (forward) and h ≈ ε^(1/3) ≈ 6e-6 (central), times
constants that depend on f (`optimal_steps` computes them from the symbolic f'' and f'''), and
the best error is about √ε (forward) or ε^(2/3) (central): 8 and 11 digits out of 16.
`fd_sweep` measures the error for h from 0.1 down to 1e-16.

**Automatic.** The same expression converted to an IR graph (`to_graph`, shared subexpressions
become shared nodes), then differentiated by `labkit.compiler.autodiff`: forward mode (one dual
pass) or reverse mode (a backward graph). No formula for f' as a whole and no step h: the chain
rule applied op by op to values. The result is exact up to rounding and the backward graph has a
bounded number of nodes per forward node, so its cost is a constant multiple of f's.

`compare_methods` puts the three side by side on ``f(x) = x·sin(x)·exp(x)``; the reference value
comes from mpmath at 50 significant digits, independently of every method compared.
"""
from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass

import torch

from labkit.checks import check_int, check_real, check_sequence
from labkit.compiler import autodiff
from labkit.compiler.ir import Graph, run, topo_order
from labkit.table import Table

__all__ = ["Expr", "const", "var", "add", "sub", "mul", "div", "neg", "sin", "cos", "exp", "log",
           "diff", "evaluate", "tree_size", "dag_size", "to_graph", "example_expr", "nested_product",
           "swell_table", "forward_difference", "central_difference", "FDSweep", "fd_sweep",
           "optimal_steps", "exact_derivative", "compare_methods", "EPS", "FD_STEP", "FD_TOL",
           "fd_check_vjp"]

EPS = float(torch.finfo(torch.float64).eps)       # 2**-52: float64's relative spacing at 1
UNARY = ("neg", "sin", "cos", "exp", "log")
BINARY = ("add", "sub", "mul", "div")


# ---- symbolic: expression trees ----------------------------------------------------------------
class Expr:
    """A node of an expression tree: ``op`` in const, var, add, sub, mul, div, neg, sin, cos,
    exp, log; ``args`` its sub-expressions; ``value`` the number of a const or name of a var.

    Expressions are hash-consed: building an expression equal to one that exists returns the
    existing object, so equal subtrees are the same object (``a is b`` tests equality) and a
    derivative memoized per object is computed once per distinct subexpression. Build them with
    the constructors (`const`, `var`, `add`, `mul`, ...) or with operators (``x * sin(x)``)."""

    __slots__ = ("op", "args", "value", "__weakref__")
    _table: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()

    def __new__(cls, op: str, args: tuple = (), value=None):
        if not isinstance(op, str) or not isinstance(args, tuple) or not all(isinstance(a, Expr) for a in args):
            raise TypeError(f"Expr: op must be a string and args a tuple of Expr, got {op!r}, {args!r}")
        if value is not None and not isinstance(value, (str, int, float)):
            raise TypeError(f"Expr: value must be a number or a variable name, got {type(value).__name__}")
        # args are themselves interned, so their ids identify their structure; a table entry
        # lives only while its Expr does, which keeps its args (and their ids) alive
        key = (op, tuple(id(a) for a in args), value)
        found = cls._table.get(key)
        if found is not None:
            return found
        e = super().__new__(cls)
        e.op, e.args, e.value = op, tuple(args), value
        cls._table[key] = e
        return e

    def __repr__(self) -> str:
        return f"Expr({self})"

    def __str__(self) -> str:
        return _infix(self)

    def __add__(self, o): return add(self, _lift(o))
    def __radd__(self, o): return add(_lift(o), self)
    def __sub__(self, o): return sub(self, _lift(o))
    def __rsub__(self, o): return sub(_lift(o), self)
    def __mul__(self, o): return mul(self, _lift(o))
    def __rmul__(self, o): return mul(_lift(o), self)
    def __truediv__(self, o): return div(self, _lift(o))
    def __rtruediv__(self, o): return div(_lift(o), self)
    def __neg__(self): return neg(self)


def const(value) -> Expr:
    """A number (stored as float; ``const(2) is const(2.0)``)."""
    return Expr("const", (), float(check_real("const", "value", value)))


def var(name: str = "x") -> Expr:
    """A variable."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"var: name must be an identifier, got {name!r}")
    return Expr("var", (), name)


def _lift(o) -> Expr:
    return o if isinstance(o, Expr) else const(o)


def _is(e: Expr, number: float) -> bool:
    return e.op == "const" and e.value == number


def add(a: Expr, b: Expr) -> Expr:
    """a + b, simplified: constants folded, ``a + 0 → a``."""
    if a.op == "const" and b.op == "const":
        return const(a.value + b.value)
    if _is(a, 0.0):
        return b
    if _is(b, 0.0):
        return a
    return Expr("add", (a, b))


def sub(a: Expr, b: Expr) -> Expr:
    """a − b, simplified: constants folded, ``a − 0 → a``, ``0 − b → −b``, ``a − a → 0``."""
    if a.op == "const" and b.op == "const":
        return const(a.value - b.value)
    if _is(b, 0.0):
        return a
    if _is(a, 0.0):
        return neg(b)
    if a is b:
        return const(0.0)
    return Expr("sub", (a, b))


def mul(a: Expr, b: Expr) -> Expr:
    """a · b, simplified: constants folded, ``0·a → 0``, ``1·a → a``, ``(−1)·a → −a``."""
    if a.op == "const" and b.op == "const":
        return const(a.value * b.value)
    for u, v in ((a, b), (b, a)):
        if _is(u, 0.0):
            return const(0.0)
        if _is(u, 1.0):
            return v
        if _is(u, -1.0):
            return neg(v)
    return Expr("mul", (a, b))


def div(a: Expr, b: Expr) -> Expr:
    """a / b, simplified: ``0/b → 0``, ``a/1 → a``, constants folded (b ≠ 0)."""
    if _is(b, 0.0):
        raise ZeroDivisionError("div: division by the constant 0")
    if a.op == "const" and b.op == "const":
        return const(a.value / b.value)
    if _is(a, 0.0):
        return const(0.0)
    if _is(b, 1.0):
        return a
    return Expr("div", (a, b))


def neg(a: Expr) -> Expr:
    """−a, simplified: ``−c`` folded, ``−(−a) → a``."""
    if a.op == "const":
        return const(-a.value)
    if a.op == "neg":
        return a.args[0]
    return Expr("neg", (a,))


def sin(a: Expr) -> Expr:
    a = _lift(a)
    return const(0.0) if _is(a, 0.0) else Expr("sin", (a,))


def cos(a: Expr) -> Expr:
    a = _lift(a)
    return const(1.0) if _is(a, 0.0) else Expr("cos", (a,))


def exp(a: Expr) -> Expr:
    a = _lift(a)
    return const(1.0) if _is(a, 0.0) else Expr("exp", (a,))


def log(a: Expr) -> Expr:
    a = _lift(a)
    return const(0.0) if _is(a, 1.0) else Expr("log", (a,))


def diff(e: Expr, name: str = "x") -> Expr:
    """d e / d name, by the derivative rules, simplified as it is built.

    Memoized per distinct subexpression (so the *work* is proportional to the number of distinct
    subexpressions); the *tree* it returns can still be far larger than e's (`tree_size`)."""
    if not isinstance(e, Expr):
        raise TypeError(f"diff: expected an Expr, got {type(e).__name__}")
    memo: dict = {}

    def d(u: Expr) -> Expr:
        if id(u) in memo:
            return memo[id(u)]
        op, args = u.op, u.args
        if op == "const":
            out = const(0.0)
        elif op == "var":
            out = const(1.0 if u.value == name else 0.0)
        elif op == "add":
            out = add(d(args[0]), d(args[1]))
        elif op == "sub":
            out = sub(d(args[0]), d(args[1]))
        elif op == "mul":                                  # product rule
            out = add(mul(d(args[0]), args[1]), mul(args[0], d(args[1])))
        elif op == "div":                                  # quotient rule
            a, b = args
            out = div(sub(mul(d(a), b), mul(a, d(b))), mul(b, b))
        elif op == "neg":
            out = neg(d(args[0]))
        elif op == "sin":                                  # chain rule from here on
            out = mul(cos(args[0]), d(args[0]))
        elif op == "cos":
            out = neg(mul(sin(args[0]), d(args[0])))
        elif op == "exp":
            out = mul(u, d(args[0]))
        elif op == "log":
            out = div(d(args[0]), args[0])
        else:  # pragma: no cover - every constructor makes a known op
            raise ValueError(f"diff: unknown op {op!r}")
        memo[id(u)] = out
        return out

    return d(e)


def _postorder(e: Expr) -> list:
    """Distinct subexpressions of e, each after its arguments (iterative)."""
    order, seen, stack = [], set(), [(e, False)]
    while stack:
        u, expanded = stack.pop()
        if expanded:
            order.append(u)
        elif id(u) not in seen:
            seen.add(id(u))
            stack.append((u, True))
            stack.extend((a, False) for a in reversed(u.args) if id(a) not in seen)
    return order


def tree_size(e: Expr) -> int:
    """Number of nodes of e written out as a tree (a subexpression used twice counts twice):
    the length of the formula on paper."""
    size: dict = {}
    for u in _postorder(e):
        size[id(u)] = 1 + sum(size[id(a)] for a in u.args)
    return size[id(e)]


def dag_size(e: Expr) -> int:
    """Number of distinct subexpressions of e (each shared subexpression counted once)."""
    return len(_postorder(e))


def evaluate(e: Expr, x, name: str = "x", lib=math):
    """The value of e at ``name = x``; ``lib`` supplies sin, cos, exp, log (math by default;
    mpmath for high precision, in which case constants are converted with ``lib.mpf``)."""
    num = getattr(lib, "mpf", float)
    vals: dict = {}
    for u in _postorder(e):
        a = [vals[id(v)] for v in u.args]
        if u.op == "const":
            v = num(u.value)
        elif u.op == "var":
            if u.value != name:
                raise ValueError(f"evaluate: no value for variable {u.value!r}")
            v = x
        elif u.op in ("add", "sub", "mul", "div"):
            v = {"add": lambda p, q: p + q, "sub": lambda p, q: p - q,
                 "mul": lambda p, q: p * q, "div": lambda p, q: p / q}[u.op](*a)
        elif u.op == "neg":
            v = -a[0]
        else:
            v = getattr(lib, u.op)(a[0])
        vals[id(u)] = v
    return vals[id(e)]


_STR = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def _infix(e: Expr) -> str:
    if e.op == "const":
        return f"{e.value:g}"
    if e.op == "var":
        return e.value
    if e.op == "neg":
        return f"-({_infix(e.args[0])})"
    if e.op in _STR:
        return f"({_infix(e.args[0])} {_STR[e.op]} {_infix(e.args[1])})"
    return f"{e.op}({_infix(e.args[0])})"


def to_graph(e: Expr, name: str = "x") -> tuple:
    """The expression as an IR graph with one scalar input ``name``: ``(graph, x, out)``.
    Each distinct subexpression becomes one node, so shared subexpressions are computed once."""
    g = Graph()
    x = g.input(name, ())
    nodes: dict = {}
    for u in _postorder(e):
        a = [nodes[id(v)] for v in u.args]
        if u.op == "const":
            n = g.constant(u.value)
        elif u.op == "var":
            if u.value != name:
                raise ValueError(f"to_graph: unknown variable {u.value!r}")
            n = x
        else:
            n = getattr(g, u.op)(*a)
        nodes[id(u)] = n
    out = nodes[id(e)]
    g.output(out)
    return g, x, out


def example_expr() -> Expr:
    """f(x) = x·sin(x)·exp(x)."""
    x = var("x")
    return x * sin(x) * exp(x)


def nested_product(depth: int) -> Expr:
    """f_depth where f_0 = x and f_{k+1} = 4·f_k·(1 − f_k) (the logistic map, iterated)."""
    depth = check_int("nested_product", "depth", depth, minimum=0, maximum=64)   # the tree doubles per level
    f = var("x")
    for _ in range(depth):
        f = 4.0 * f * (1.0 - f)
    return f


def _ad_node_counts(e: Expr) -> tuple:
    """(forward nodes, backward nodes) of reverse-mode AD on e's graph (inputs and constants
    included in the forward count)."""
    g, x, out = to_graph(e)
    forward = len(topo_order(out))
    gx = autodiff.grad(g, out, x)[x.name]
    return forward, len(topo_order([out, gx])) - forward


def swell_table(depths=range(1, 7)) -> Table:
    """Expression swell on `nested_product`: for each depth, the tree sizes of f and of its
    simplified symbolic derivative f', their ratio, f''s distinct subexpressions, and the nodes of
    the forward and backward graphs of reverse-mode AD on the same function."""
    rows = []
    for d in check_sequence("swell_table", "depths", depths):
        f = nested_product(d)
        df = diff(f)
        fwd, bwd = _ad_node_counts(f)
        rows.append([d, tree_size(f), tree_size(df), tree_size(df) / tree_size(f), dag_size(df), fwd, bwd])
    return Table(["depth", "f tree", "f' tree", "f'/f", "f' distinct", "AD fwd nodes", "AD bwd nodes"],
                 rows, formats={"f'/f": ".1f"},
                 title="Expression swell: f_{k+1} = 4 f_k (1 - f_k), f_0 = x")


# ---- numerical: finite differences -------------------------------------------------------------
def forward_difference(f, x: float, h: float) -> float:
    """(f(x + h) − f(x)) / h: error O(h) from truncation plus O(ε/h) from rounding."""
    h = check_real("forward_difference", "h", h, positive=True)
    return (f(x + h) - f(x)) / h


def central_difference(f, x: float, h: float) -> float:
    """(f(x + h) − f(x − h)) / 2h: error O(h²) from truncation plus O(ε/h) from rounding."""
    h = check_real("central_difference", "h", h, positive=True)
    return (f(x + h) - f(x - h)) / (2.0 * h)


def exact_derivative(e: Expr, x: float, order: int = 1) -> float:
    """The ``order``-th derivative of e at x to float64 precision, computed by mpmath at 50
    significant digits (its own high-precision differentiation, independent of `diff`)."""
    import mpmath  # a dependency of sympy, which torch requires

    x = check_real("exact_derivative", "x", x)
    order = check_int("exact_derivative", "order", order, minimum=0)
    with mpmath.workdps(50):
        return float(mpmath.diff(lambda t: evaluate(e, t, lib=mpmath), mpmath.mpf(x), order))


def optimal_steps(e: Expr, x: float) -> dict:
    """Step sizes minimizing the modelled error, truncation + rounding, at x:
    forward ``2·√(ε|f|/|f''|)`` (from h|f''|/2 + 2ε|f|/h), central ``(3ε|f|/|f'''|)^(1/3)``
    (from h²|f'''|/6 + ε|f|/h), with f'' and f''' from `diff`; and the rules of thumb √ε, ε^(1/3)."""
    x = check_real("optimal_steps", "x", x)
    d2 = diff(diff(e))
    d3 = diff(d2)
    fx, f2, f3 = abs(evaluate(e, x)), abs(evaluate(d2, x)), abs(evaluate(d3, x))
    return {"forward": 2.0 * math.sqrt(EPS * fx / f2), "central": (3.0 * EPS * fx / f3) ** (1 / 3),
            "forward_rule": math.sqrt(EPS), "central_rule": EPS ** (1 / 3)}


@dataclass
class FDSweep:
    """Finite-difference errors against step size at one point: ``steps`` (h, decreasing),
    ``forward_errors`` and ``central_errors`` (|estimate − exact|), the measured best h and the
    error there for each scheme, and the exact derivative."""

    x: float
    exact: float
    steps: list
    forward_errors: list
    central_errors: list
    best_forward_h: float
    best_forward_error: float
    best_central_h: float
    best_central_error: float

    def slope(self, scheme: str, h_min: float, h_max: float) -> float:
        """Least-squares slope of log10(error) against log10(h) for h in [h_min, h_max]:
        about 1 (forward) or 2 (central) where truncation dominates, about −1 where rounding does."""
        errs = self.forward_errors if scheme == "forward" else self.central_errors
        pts = [(math.log10(h), math.log10(err)) for h, err in zip(self.steps, errs)
               if h_min <= h <= h_max and err > 0]
        if len(pts) < 2:
            raise ValueError(f"FDSweep.slope: fewer than 2 nonzero errors with h in [{h_min}, {h_max}]")
        mx = sum(p[0] for p in pts) / len(pts)
        my = sum(p[1] for p in pts) / len(pts)
        return sum((p[0] - mx) * (p[1] - my) for p in pts) / sum((p[0] - mx) ** 2 for p in pts)

    def table(self, every: int = 8) -> Table:
        """Every ``every``-th step as rows h | forward error | central error."""
        rows = [[h, ef, ec] for h, ef, ec in zip(self.steps, self.forward_errors,
                                                    self.central_errors)][::every]
        return Table(["h", "forward error", "central error"], rows,
                     formats={"h": ".0e", "forward error": ".1e", "central error": ".1e"},
                     title=f"finite-difference error at x = {self.x:g}")


def _in_float_range(f):
    """Run ``f(e, x, ...)`` with e checked to be an Expr; a float overflow or division by zero
    while evaluating e near x becomes a one-line ValueError naming e and x."""
    @functools.wraps(f)
    def wrapper(e=None, x=0.7, *args, **kwargs):
        if e is not None and not isinstance(e, Expr):
            raise TypeError(f"{f.__name__}: e must be an Expr (or None), got {type(e).__name__}")
        try:
            return f(e, x, *args, **kwargs)
        except (OverflowError, ZeroDivisionError) as err:
            raise ValueError(f"{f.__name__}: e cannot be evaluated in floats near x = {x!r} ({err})") from None
    return wrapper


@_in_float_range
def fd_sweep(e: Expr | None = None, x: float = 0.7, per_decade: int = 8,
             h_max_exp: int = -1, h_min_exp: int = -16) -> FDSweep:
    """Forward and central differences of e (default `example_expr`) at x for
    h = 10^(−k/per_decade), from 10^h_max_exp down to 10^h_min_exp, against `exact_derivative`."""
    fn = "fd_sweep"
    e = example_expr() if e is None else e
    x = check_real(fn, "x", x)
    per_decade = check_int(fn, "per_decade", per_decade, minimum=1, maximum=1000)
    h_max_exp = check_int(fn, "h_max_exp", h_max_exp, maximum=2)
    h_min_exp = check_int(fn, "h_min_exp", h_min_exp, minimum=-20, maximum=h_max_exp - 1)
    exact = exact_derivative(e, x)
    f = lambda t: evaluate(e, t)  # noqa: E731
    steps = [10.0 ** (-k / per_decade) for k in range(-h_max_exp * per_decade, -h_min_exp * per_decade + 1)]
    fwd = [abs(forward_difference(f, x, h) - exact) for h in steps]
    cen = [abs(central_difference(f, x, h) - exact) for h in steps]
    kf = min(range(len(steps)), key=fwd.__getitem__)
    kc = min(range(len(steps)), key=cen.__getitem__)
    return FDSweep(x, exact, steps, fwd, cen, steps[kf], fwd[kf], steps[kc], cen[kc])


# ---- the three side by side --------------------------------------------------------------------
@_in_float_range
def compare_methods(e: Expr | None = None, x: float = 0.7) -> Table:
    """f'(x) of e (default `example_expr`) by symbolic differentiation, forward and central
    differences (rule-of-thumb steps √ε·max(1, |x|) and ε^(1/3)·max(1, |x|)), forward-mode AD
    (one dual-number pass) and reverse-mode AD (a backward graph), each against the mpmath
    reference. Columns: method, f'(x), abs error, cost (what each method had to build or run)."""
    e = example_expr() if e is None else e
    x = check_real("compare_methods", "x", x)
    exact = exact_derivative(e, x)
    rows = []
    df = diff(e)
    rows.append(["symbolic", evaluate(df, x), f"f' tree {tree_size(df)} nodes (f: {tree_size(e)})"])
    f = lambda t: evaluate(e, t)  # noqa: E731
    scale = max(1.0, abs(x))
    h_fwd, h_cen = math.sqrt(EPS) * scale, EPS ** (1 / 3) * scale
    rows.append(["forward difference", forward_difference(f, x, h_fwd),
                 f"2 evaluations of f, h = {h_fwd:.1e}"])
    rows.append(["central difference", central_difference(f, x, h_cen),
                 f"2 evaluations of f, h = {h_cen:.1e}"])
    g, xn, out = to_graph(e)
    _, tangent = autodiff.jvp(g, {xn.name: x}, {xn.name: 1.0}, out)
    rows.append(["AD forward mode", float(tangent), f"1 dual pass over {len(topo_order(out))} nodes"])
    forward = len(topo_order(out))
    gx = autodiff.grad(g, out, xn)[xn.name]
    value = float(run(g, {xn.name: x}, gx))
    rows.append(["AD reverse mode", value,
                 f"{forward} forward + {len(topo_order([out, gx])) - forward} backward nodes"])
    rows = [[name, v, abs(v - exact), cost] for name, v, cost in rows]
    return Table(["method", "f'(x)", "abs error", "cost"], rows,
                 formats={"f'(x)": ".15f", "abs error": ".1e"},
                 title=f"d/dx {e} at x = {x:g} (exact {exact:.15f})")


# ---- checking backward rules by finite differences -----------------------------------------------
#: central-difference step for `fd_check_vjp`: near ε^(1/3) ≈ 6e-6, where truncation (≈ h²·|f'''|/6)
#: and rounding (≈ ε·|f|/h) balance, both ≈ 1e-10 for the O(1) values used
FD_STEP = 1e-5
#: relative tolerance of `fd_check_vjp`: three orders above the difference's own error (1.2e-9 at most
#: on its cases, div's b), far below the O(1) error of a wrong rule (a lost factor, sign or transpose)
FD_TOL = 1e-6

_FD_FORWARD = {
    "mul": lambda a, b: a * b, "div": lambda a, b: a / b, "matmul": lambda a, b: a @ b,
    "tanh": torch.tanh, "exp": torch.exp, "log": torch.log, "relu": torch.relu,
}


def _fd_cases(seed: int) -> list:
    """(op, inputs, attrs, forward) on float64 inputs drawn from ``seed``: away from relu's kink
    (|a| >= 0.1) and log's and div's poles (>= 0.5)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        return torch.where(x.abs() < 0.1, x.sign() * 0.1 + x, x)      # keep clear of 0

    a, b, pos = r(3, 4), r(3, 4), r(3, 4).abs() + 0.5
    cases = [(op, ins, None, _FD_FORWARD[op]) for op, ins in
             (("mul", [a, b]), ("div", [a, pos]), ("tanh", [a]), ("exp", [a]), ("log", [pos]), ("relu", [a]),
              ("matmul", [r(3, 5), r(5, 2)]))]
    for axis in (None, 0, -1):
        cases.append(("sum", [a], {"axis": axis}, (lambda x, k=axis: x.sum() if k is None else x.sum(k))))
    return cases


def fd_check_vjp(vjp_fn, seed: int = 0, h: float = FD_STEP, tol: float = FD_TOL) -> Table:
    """Check backward rules ``vjp_fn(op, inputs, output, grad_output, attrs)`` (the Lab 13
    exercise's contract) against central differences, in float64, one input at a time.

    For random ḡ (the upstream gradient) and a random direction v of input i, the scalar
    φ(s) = ⟨ḡ, f(..., xᵢ + s·v, ...)⟩ has φ'(0) = ⟨∂L/∂xᵢ, v⟩ when the rule is right. The table
    gives both sides, (φ(h) − φ(−h)) / 2h and ⟨rule's gradient, v⟩, their relative difference
    |Δ| / max(1, |φ'(0)|), and "yes" when it is below ``tol`` (see `FD_TOL`). A rule that raises
    or returns the wrong number or shapes of gradients gets "NO" with the reason."""
    h = check_real("fd_check_vjp", "h", h, positive=True)
    g = torch.Generator().manual_seed(seed + 1)
    rows = []
    for op, ins, attrs, f in _fd_cases(seed):
        out = f(*ins)
        gbar = torch.randn(out.shape, generator=g, dtype=torch.float64)
        name = op if attrs is None else f"sum axis={attrs['axis']}"
        try:
            grads = vjp_fn(op, [x.clone() for x in ins], out.clone(), gbar.clone(), attrs)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001 - the learner's rule may raise anything: one row says what
            rows.append((name, "-", "-", "-", "-", f"NO: {type(e).__name__}"))
            continue
        for i, x in enumerate(ins):
            v = torch.randn(x.shape, generator=g, dtype=torch.float64)

            def phi(s, i=i, v=v):
                moved = [y + s * v if j == i else y for j, y in enumerate(ins)]
                return float((gbar * f(*moved)).sum())

            fd = (phi(h) - phi(-h)) / (2 * h)
            if len(grads) != len(ins) or tuple(grads[i].shape) != tuple(x.shape):
                rows.append((name, i, f"{fd:.9f}", "-", "-", "NO: wrong number or shape of gradients"))
                continue
            rule = float((grads[i].double() * v).sum())
            rel = abs(rule - fd) / max(1.0, abs(fd))
            rows.append((name, i, f"{fd:.9f}", f"{rule:.9f}", f"{rel:.1e}", "yes" if rel < tol else "NO"))
    return Table(["op", "input", "finite difference", "your rule", "relative |Δ|", f"< {tol:g}"], rows,
                 title=f"your vjp against central differences (float64, h = {h:g})")
