"""Search over algebraic rewrites of a tensor program, in the spirit of TASO (Jia et al., SOSP 2019).

A compiler that only applies rewrites which make the program faster right now (greedy) stops at
the first program none of its rules improves. TASO (the Tensor Algebra SuperOptimizer) instead
(1) collects many small *substitutions* (rules), each checked to preserve the program's value,
(2) scores programs with a *cost model*, and (3) searches with a priority queue that may take
steps making the program up to a factor α *worse*, because a worse program can be the only way
to reach a much better one. This module does the three on a tiny language of matrix programs.

**The language.** An `Expr` is a tree of 2-D tensors: ``Var(name, shape)`` inputs, the
constants ``Zero(shape)`` and ``Eye(n)``, and ``MatMul`` (``a @ b``), ``Add`` (``a + b``),
``Transpose`` (``a.t()``) and ``Concat(a, b, axis)``. Expressions are immutable and compared by
structure, so a subexpression that occurs twice is one value computed once (a DAG, as in a real
dataflow graph).

**Rules** (`Rule`) rewrite a pattern into another: ``P("A")`` stands for any subexpression, and
``Rule.dims`` names each pattern variable's shape with symbols (``A: (m, k)``) so that the same
symbol must mean the same size everywhere. `RULES` holds matmul distributivity both ways
(A·B + A·C ↔ A·(B + C)), transpose of a product ((A·B)ᵀ ↔ Bᵀ·Aᵀ), concatenation of matmuls that
share an operand ([A·B | A·C] ↔ A·[B | C]), associativity ((A·B)·C ↔ A·(B·C)), transpose of a sum,
double transpose, identity and zero elimination, and commutativity of +.

**Verification by random testing** (`verify_rule`). TASO proves its substitutions with an SMT
solver against operator axioms; here each candidate is instantiated on random sizes and random
float64 tensors, and both sides are computed and compared. Both sides are polynomials in the
entries of the inputs, and two different polynomials agree on random real inputs with probability
zero (the Schwartz–Zippel lemma), so a false rule is caught by the first well-typed trial.
`WRONG_RULES` holds a plausible but false candidate, (A·B)ᵀ → Aᵀ·Bᵀ, that `verified_rules`
rejects.

**Cost** (`CostModel`): each distinct op costs flops / peak + bytes moved / bandwidth, seconds;
inputs and constants are free. ``measured_seconds`` times the program instead.

**Search.** `greedy_search` applies the best strictly improving rewrite until none is left.
`backtracking_search` is TASO's cost-based backtracking search (its Algorithm 2): a priority
queue ordered by cost; every new program costing less than α × the best cost so far is queued.
`stuck_example` builds a program where greedy is stuck and backtracking is not.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from dataclasses import dataclass

import torch

from labkit.bench import median_time
from labkit.checks import check_int, check_real, check_sequence

__all__ = ["Expr", "Var", "Zero", "Eye", "MatMul", "Add", "Transpose", "Concat", "P", "shape",
           "evaluate", "random_inputs", "variables", "Rule", "RULES", "WRONG_RULES", "CANDIDATE_RULES",
           "Verdict", "verify_rule", "verified_rules", "rewrites", "CostModel", "measured_seconds",
           "SearchResult", "greedy_search", "backtracking_search", "stuck_example"]


# ---- the expression language --------------------------------------------------------------------
class Expr:
    """Base class of expressions: ``a @ b``, ``a + b`` and ``a.t()`` build new ones."""

    def __matmul__(self, other):
        return MatMul(self, other)

    def __add__(self, other):
        return Add(self, other)

    def t(self):
        return Transpose(self)


def _sizes(cls: str, what: str, sizes, symbols: bool) -> tuple:
    """``sizes`` as a tuple of two ints >= 1 (or, in a pattern, size symbols: strings)."""
    if not isinstance(sizes, (tuple, list)) or len(sizes) != 2:
        raise ValueError(f"{cls}: {what} must be (rows, cols), got {sizes!r}")
    return tuple(v if symbols and isinstance(v, str) else check_int(cls, what, v, minimum=1) for v in sizes)


def _operands(e) -> None:
    for name in ("a", "b"):
        x = getattr(e, name, None)
        if name in e.__dataclass_fields__ and not isinstance(x, Expr):
            raise TypeError(f"{type(e).__name__}: {name} must be an Expr, got {type(x).__name__}")


@dataclass(frozen=True)
class Var(Expr):
    """An input matrix of ``shape`` (rows, cols), sizes >= 1."""
    name: str
    shape: tuple

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Var: name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "shape", _sizes("Var", "shape", self.shape, symbols=False))

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class Zero(Expr):
    """The all-zero matrix of ``shape`` (in a pattern the sizes may be symbols)."""
    shape: tuple

    def __post_init__(self):
        object.__setattr__(self, "shape", _sizes("Zero", "shape", self.shape, symbols=True))

    def __str__(self):
        return "0"


@dataclass(frozen=True)
class Eye(Expr):
    """The n×n identity matrix (in a pattern ``n`` may be a symbol)."""
    n: object

    def __post_init__(self):
        if not isinstance(self.n, str):
            check_int("Eye", "n", self.n, minimum=1)

    def __str__(self):
        return "I"


@dataclass(frozen=True)
class MatMul(Expr):
    a: Expr
    b: Expr

    def __post_init__(self):
        _operands(self)

    def __str__(self):
        return f"({self.a}·{self.b})"


@dataclass(frozen=True)
class Add(Expr):
    a: Expr
    b: Expr

    def __post_init__(self):
        _operands(self)

    def __str__(self):
        return f"({self.a} + {self.b})"


@dataclass(frozen=True)
class Transpose(Expr):
    a: Expr

    def __post_init__(self):
        _operands(self)

    def __str__(self):
        return f"{self.a}ᵀ"


@dataclass(frozen=True)
class Concat(Expr):
    """``a`` and ``b`` side by side (axis 1, printed [a | b]) or stacked (axis 0, [a ; b])."""
    a: Expr
    b: Expr
    axis: int

    def __post_init__(self):
        _operands(self)
        check_int("Concat", "axis", self.axis, minimum=0, maximum=1)   # the language is 2-D

    def __str__(self):
        return f"[{self.a} {'|' if self.axis == 1 else ';'} {self.b}]"


@dataclass(frozen=True)
class P(Expr):
    """A pattern variable: matches any subexpression (the same one wherever the name recurs)."""
    name: str

    def __str__(self):
        return self.name


_OPS = (MatMul, Add, Transpose, Concat)


def _children(e: Expr) -> tuple:
    if isinstance(e, (MatMul, Add, Concat)):
        return (e.a, e.b)
    if isinstance(e, Transpose):
        return (e.a,)
    return ()


def _with_child(e: Expr, i: int, child: Expr) -> Expr:
    return dataclasses.replace(e, **{"ab"[i]: child})


def shape(e: Expr) -> tuple:
    """(rows, cols) of ``e``; ValueError (one line) if an op's operands do not fit together."""
    if isinstance(e, (Var, Zero)):
        return tuple(e.shape)
    if isinstance(e, Eye):
        return (e.n, e.n)
    if isinstance(e, Transpose):
        r, c = shape(e.a)
        return (c, r)
    if isinstance(e, (MatMul, Add, Concat)):
        sa, sb = shape(e.a), shape(e.b)
        if isinstance(e, MatMul) and sa[1] == sb[0]:
            return (sa[0], sb[1])
        if isinstance(e, Add) and sa == sb:
            return sa
        if isinstance(e, Concat) and sa[1 - e.axis] == sb[1 - e.axis]:
            return (sa[0] + sb[0], sa[1]) if e.axis == 0 else (sa[0], sa[1] + sb[1])
        raise ValueError(f"shape: {type(e).__name__} of shapes {sa} and {sb} does not fit: {e}")
    raise TypeError(f"shape: not a concrete expression: {e!r}")


def variables(e: Expr) -> dict:
    """The `Var`s of ``e``: name -> shape (ValueError if one name has two shapes)."""
    found: dict = {}
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Var):
            if found.setdefault(x.name, tuple(x.shape)) != tuple(x.shape):
                raise ValueError(f"variables: {x.name} has shapes {found[x.name]} and {x.shape}")
        stack.extend(_children(x))
    return found


def random_inputs(e: Expr, seed: int = 0) -> dict:
    """Standard-normal float64 tensors for every `Var` of ``e``, by name."""
    gen = torch.Generator().manual_seed(check_int("random_inputs", "seed", seed, minimum=0))
    return {name: torch.randn(s, generator=gen, dtype=torch.float64)
            for name, s in sorted(variables(e).items())}


def evaluate(e: Expr, env: dict, _memo: dict | None = None) -> torch.Tensor:
    """The value of ``e`` given tensors for its variables (``env``: name -> tensor); each distinct
    subexpression is computed once."""
    memo = {} if _memo is None else _memo
    if e in memo:
        return memo[e]
    if isinstance(e, Var):
        out = env[e.name]
    elif isinstance(e, Zero):
        out = torch.zeros(e.shape, dtype=torch.float64)
    elif isinstance(e, Eye):
        out = torch.eye(e.n, dtype=torch.float64)
    elif isinstance(e, Transpose):
        out = evaluate(e.a, env, memo).t()
    else:
        a, b = evaluate(e.a, env, memo), evaluate(e.b, env, memo)
        out = a @ b if isinstance(e, MatMul) else a + b if isinstance(e, Add) else torch.cat((a, b), e.axis)
    memo[e] = out
    return out


# ---- rules: patterns, matching, rewriting -------------------------------------------------------
def _unify(dims: dict, sym, size: int) -> bool:
    if isinstance(sym, int):
        return sym == size
    return dims.setdefault(sym, size) == size


def _match(pat: Expr, e: Expr, exprs: dict, dims: dict) -> bool:
    if isinstance(pat, P):
        return exprs.setdefault(pat.name, e) == e
    if isinstance(pat, Zero):
        return isinstance(e, Zero) and all(_unify(dims, s, v) for s, v in zip(pat.shape, e.shape))
    if isinstance(pat, Eye):
        return isinstance(e, Eye) and _unify(dims, pat.n, e.n)
    if type(pat) is not type(e) or (isinstance(pat, Concat) and pat.axis != e.axis):
        return False
    return all(_match(p, x, exprs, dims) for p, x in zip(_children(pat), _children(e)))


def _instantiate(pat: Expr, exprs: dict, dims: dict) -> Expr:
    if isinstance(pat, P):
        return exprs[pat.name]
    if isinstance(pat, Zero):
        return Zero(tuple(dims[s] if isinstance(s, str) else s for s in pat.shape))
    if isinstance(pat, Eye):
        return Eye(dims[pat.n] if isinstance(pat.n, str) else pat.n)
    out = pat
    for i, child in enumerate(_children(pat)):
        out = _with_child(out, i, _instantiate(child, exprs, dims))
    return out


@dataclass(frozen=True)
class Rule:
    """Rewrite ``lhs`` into ``rhs``. ``dims`` gives each pattern variable's shape as a pair of size
    symbols (``{"A": ("m", "k")}``); a symbol also sizes ``Zero``/``Eye`` in the patterns."""
    name: str
    lhs: Expr
    rhs: Expr
    dims: tuple                                           # ((var, (sym, sym)), ...)

    def apply(self, e: Expr) -> Expr | None:
        """``rhs`` for the match of ``lhs`` at the root of ``e``, or None if it does not match
        (including when matched pieces' sizes break the ``dims`` constraints)."""
        exprs, dims = {}, {}
        if not _match(self.lhs, e, exprs, dims):
            return None
        for var, syms in self.dims:
            try:
                got = shape(exprs[var])
            except ValueError:
                return None
            if not all(_unify(dims, s, v) for s, v in zip(syms, got)):
                return None
        return _instantiate(self.rhs, exprs, dims)

    def __str__(self):
        return f"{self.name}: {self.lhs} → {self.rhs}"


def _rule(name, lhs, rhs, **dims) -> Rule:
    return Rule(name, lhs, rhs, tuple(sorted(dims.items())))


A, B, C = P("A"), P("B"), P("C")
RULES = (
    _rule("factor-left", A @ B + A @ C, A @ (B + C), A=("m", "k"), B=("k", "n"), C=("k", "n")),
    _rule("expand-left", A @ (B + C), A @ B + A @ C, A=("m", "k"), B=("k", "n"), C=("k", "n")),
    _rule("factor-right", B @ A + C @ A, (B + C) @ A, A=("k", "n"), B=("m", "k"), C=("m", "k")),
    _rule("expand-right", (B + C) @ A, B @ A + C @ A, A=("k", "n"), B=("m", "k"), C=("m", "k")),
    _rule("assoc-right", (A @ B) @ C, A @ (B @ C), A=("m", "k"), B=("k", "p"), C=("p", "n")),
    _rule("assoc-left", A @ (B @ C), (A @ B) @ C, A=("m", "k"), B=("k", "p"), C=("p", "n")),
    _rule("transpose-of-product", (A @ B).t(), B.t() @ A.t(), A=("m", "k"), B=("k", "n")),
    _rule("product-of-transposes", B.t() @ A.t(), (A @ B).t(), A=("m", "k"), B=("k", "n")),
    _rule("transpose-of-sum", (A + B).t(), A.t() + B.t(), A=("m", "n"), B=("m", "n")),
    _rule("sum-of-transposes", A.t() + B.t(), (A + B).t(), A=("m", "n"), B=("m", "n")),
    _rule("double-transpose", A.t().t(), A, A=("m", "n")),
    _rule("concat-shared-left", Concat(A @ B, A @ C, 1), A @ Concat(B, C, 1),
          A=("m", "k"), B=("k", "n"), C=("k", "p")),
    _rule("split-shared-left", A @ Concat(B, C, 1), Concat(A @ B, A @ C, 1),
          A=("m", "k"), B=("k", "n"), C=("k", "p")),
    _rule("concat-shared-right", Concat(B @ A, C @ A, 0), Concat(B, C, 0) @ A,
          A=("k", "n"), B=("m", "k"), C=("p", "k")),
    _rule("split-shared-right", Concat(B, C, 0) @ A, Concat(B @ A, C @ A, 0),
          A=("k", "n"), B=("m", "k"), C=("p", "k")),
    _rule("add-commute", A + B, B + A, A=("m", "n"), B=("m", "n")),
    _rule("matmul-identity-right", A @ Eye("n"), A, A=("m", "n")),
    _rule("matmul-identity-left", Eye("m") @ A, A, A=("m", "n")),
    _rule("add-zero-right", A + Zero(("m", "n")), A, A=("m", "n")),
    _rule("add-zero-left", Zero(("m", "n")) + A, A, A=("m", "n")),
    _rule("matmul-zero-right", A @ Zero(("k", "n")), Zero(("m", "n")), A=("m", "k")),
    _rule("matmul-zero-left", Zero(("m", "k")) @ A, Zero(("m", "n")), A=("k", "n")),
)
# A common mistake: the transpose of a product keeps the order. Square shapes make both sides
# well-typed, so only the values can tell (and random testing does).
WRONG_RULES = (
    _rule("transpose-of-product-same-order", (A @ B).t(), A.t() @ B.t(), A=("n", "n"), B=("n", "n")),
)
CANDIDATE_RULES = RULES + WRONG_RULES
del A, B, C


@dataclass(frozen=True)
class Verdict:
    """The outcome of `verify_rule`: accepted or not, why, and how many trials were well-typed."""
    rule: Rule
    ok: bool
    reason: str
    trials: int


def _symbols(rule: Rule) -> list:
    syms = {s for _, pair in rule.dims for s in pair}
    stack = [rule.lhs, rule.rhs]
    while stack:
        x = stack.pop()
        if isinstance(x, Zero):
            syms |= {s for s in x.shape if isinstance(s, str)}
        elif isinstance(x, Eye) and isinstance(x.n, str):
            syms.add(x.n)
        stack.extend(_children(x))
    return sorted(syms)


def verify_rule(rule: Rule, trials: int = 8, seed: int = 0, max_size: int = 5, tol: float = 1e-9) -> Verdict:
    """Accept ``rule`` if, for ``trials`` random size assignments (1..``max_size``) and random
    float64 inputs, the instantiated ``lhs`` is matched by the rule and ``rhs`` has the same shape
    and the same value (``torch.allclose``, rtol = atol = ``tol``)."""
    trials = check_int("verify_rule", "trials", trials, minimum=1)
    max_size = check_int("verify_rule", "max_size", max_size, minimum=1)
    tol = check_real("verify_rule", "tol", tol, positive=True)
    rng = random.Random(check_int("verify_rule", "seed", seed, minimum=0))
    syms, typed = _symbols(rule), 0
    for trial in range(trials):
        dims = {s: rng.randint(1, max_size) for s in syms}
        exprs = {v: Var(v, (dims[r], dims[c])) for v, (r, c) in rule.dims}
        lhs, rhs = _instantiate(rule.lhs, exprs, dims), _instantiate(rule.rhs, exprs, dims)
        try:
            want = shape(lhs)
        except ValueError:
            continue                                      # these sizes do not make a valid lhs
        typed += 1
        if rule.apply(lhs) != rhs:
            return Verdict(rule, False, f"the rule does not match its own left side {lhs}", typed)
        try:
            got = shape(rhs)
        except ValueError as err:
            return Verdict(rule, False, f"right side ill-typed for sizes {dims}: {err}", typed)
        if got != want:
            return Verdict(rule, False, f"shape {got} instead of {want} for sizes {dims}", typed)
        env = random_inputs(lhs, seed=seed * 1000 + trial)
        a, b = evaluate(lhs, env), evaluate(rhs, env)
        if not torch.allclose(a, b, rtol=tol, atol=tol):
            return Verdict(rule, False, f"values differ by {(a - b).abs().max().item():.3g} "
                                        f"for sizes {dims}", typed)
    if typed == 0:
        return Verdict(rule, False, "no well-typed instance was drawn", 0)
    return Verdict(rule, True, f"equal on {typed} random instances", typed)


def verified_rules(candidates=CANDIDATE_RULES, trials: int = 8, seed: int = 0) -> tuple:
    candidates = check_sequence("verified_rules", "candidates", candidates, minimum=0)
    trials = check_int("verified_rules", "trials", trials, minimum=1, maximum=1000)
    seed = check_int("verified_rules", "seed", seed, minimum=0, maximum=2 ** 62)
    """The candidates that `verify_rule` accepts, in order."""
    return tuple(r for r in candidates if verify_rule(r, trials=trials, seed=seed).ok)


def rewrites(e: Expr, rules) -> list:
    """Every program one rule application away from ``e``: ``(rule name, new expression)`` for
    each rule at each position in the tree, well-typed, without duplicates, ``e`` excluded."""
    out, seen = [], {e}

    def at(x: Expr, rule: Rule) -> list:
        found = []
        r = rule.apply(x)
        if r is not None:
            found.append(r)
        for i, child in enumerate(_children(x)):
            found += [_with_child(x, i, c) for c in at(child, rule)]
        return found

    for rule in rules:
        for new in at(e, rule):
            if new in seen:
                continue
            seen.add(new)
            try:
                shape(new)
            except ValueError:
                continue
            out.append((rule.name, new))
    return out


# ---- cost ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CostModel:
    """Roofline-style cost of a program, seconds: each distinct op costs its flops / ``flops_per_s``
    plus the elements it reads and writes × ``bytes_per_element`` / ``bytes_per_s`` (no overlap).
    Inputs, zeros and identities cost nothing. Defaults: an assumed 100 GFLOP/s, 20 GB/s, float32.

        matmul (m,k)·(k,n): 2mkn flops, mk + kn + mn elements
        add (m,n):          mn flops,   3mn elements
        transpose (m,n):    0 flops,    2mn elements (a copy into the other layout)
        concat -> (m,n):    0 flops,    2mn elements
    """
    flops_per_s: float = 1e11
    bytes_per_s: float = 2e10
    bytes_per_element: int = 4

    def __post_init__(self):
        check_real("CostModel", "flops_per_s", self.flops_per_s, positive=True)
        check_real("CostModel", "bytes_per_s", self.bytes_per_s, positive=True)
        check_int("CostModel", "bytes_per_element", self.bytes_per_element, minimum=1)

    def counts(self, e: Expr) -> tuple:
        """(flops, elements moved) of ``e``, each distinct op once."""
        flops = moved = 0
        seen, stack = set(), [e]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            stack.extend(_children(x))
            if isinstance(x, MatMul):
                (m, k), (_, n) = shape(x.a), shape(x.b)
                flops, moved = flops + 2 * m * k * n, moved + m * k + k * n + m * n
            elif isinstance(x, Add):
                m, n = shape(x)
                flops, moved = flops + m * n, moved + 3 * m * n
            elif isinstance(x, (Transpose, Concat)):
                m, n = shape(x)
                moved += 2 * m * n
        return flops, moved

    def __call__(self, e: Expr) -> float:
        flops, moved = self.counts(e)
        return flops / self.flops_per_s + moved * self.bytes_per_element / self.bytes_per_s


def measured_seconds(e: Expr, seed: int = 0, repeat: int = 5) -> float:
    """Median wall time of `evaluate` on random inputs (``labkit.bench.median_time``), seconds."""
    repeat = check_int("measured_seconds", "repeat", repeat, minimum=1)
    _check_program("measured_seconds", e)
    env = random_inputs(e, seed)
    return median_time(lambda: evaluate(e, env), repeat=repeat)


# ---- search -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchResult:
    """The best program found, its cost and the start's (seconds under the cost model), the rules
    applied from start to best, and how many programs had their rewrites generated."""
    best: Expr
    cost: float
    start_cost: float
    path: tuple
    explored: int


def _check_program(fn: str, e) -> None:
    """A concrete program: an Expr without pattern variables whose shapes fit and whose names
    each have one shape (one-line TypeError/ValueError otherwise)."""
    if not isinstance(e, Expr) or isinstance(e, P):
        raise TypeError(f"{fn}: e must be an Expr program, got {type(e).__name__}")
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, P) or (isinstance(x, Zero) and any(isinstance(v, str) for v in x.shape)) or \
                (isinstance(x, Eye) and isinstance(x.n, str)):
            raise ValueError(f"{fn}: e is a pattern ({x}), not a program with concrete sizes")
        stack.extend(_children(x))
    try:
        shape(e)
        variables(e)
    except ValueError as err:
        raise ValueError(f"{fn}: {err}") from None


def _rules(rules):
    return verified_rules() if rules is None else tuple(rules)


def greedy_search(e: Expr, rules=None, cost: CostModel | None = None, max_steps: int = 100) -> SearchResult:
    """Apply the rewrite that lowers the cost most, again and again, until none lowers it
    (``rules`` default: `verified_rules()`)."""
    _check_program("greedy_search", e)
    rules, cost = _rules(rules), cost or CostModel()
    max_steps = check_int("greedy_search", "max_steps", max_steps, minimum=0)
    current, c, path, explored = e, cost(e), (), 0
    for _ in range(max_steps):
        explored += 1
        scored = [(cost(new), name, new) for name, new in rewrites(current, rules)]
        better = [s for s in scored if s[0] < c]
        if not better:
            break
        c, name, current = min(better, key=lambda s: s[0])
        path += (name,)
    return SearchResult(current, c, cost(e), path, explored)


def backtracking_search(e: Expr, rules=None, cost: CostModel | None = None, alpha: float = 1.05,
                        max_explored: int = 1000) -> SearchResult:
    """TASO's cost-based backtracking search: take the cheapest queued program, record it if it
    beats the best so far, and queue each new rewrite of it that costs less than ``alpha`` × the
    best cost (α = 1 allows no step uphill of the best; TASO uses 1.05). Stops when the queue is
    empty or ``max_explored`` programs have been expanded (``rules`` default: `verified_rules()`)."""
    _check_program("backtracking_search", e)
    rules, cost = _rules(rules), cost or CostModel()
    alpha = check_real("backtracking_search", "alpha", alpha, positive=True)
    max_explored = check_int("backtracking_search", "max_explored", max_explored, minimum=1)
    tie = itertools.count()
    start_cost = cost(e)
    queue = [(start_cost, next(tie), e, ())]
    seen = {e}
    best, best_cost, best_path, explored = e, start_cost, (), 0
    while queue and explored < max_explored:
        c, _, g, path = heapq.heappop(queue)
        explored += 1
        if c < best_cost:
            best, best_cost, best_path = g, c, path
        for name, new in rewrites(g, rules):
            if new in seen:
                continue
            seen.add(new)
            new_cost = cost(new)
            if new_cost < alpha * best_cost:
                heapq.heappush(queue, (new_cost, next(tie), new, path + (name,)))
    return SearchResult(best, best_cost, start_cost, best_path, explored)


def stuck_example(m: int = 7, n: int = 8) -> Expr:
    """(A·B)·C + A·D with A (m, n), B, C, D (n, n): greedy cannot improve it, but one step uphill
    (reassociate to A·(B·C), for m < n dearer by 2n²(n − m) flops) opens A·(B·C) + A·D →
    A·(B·C + D), which saves a whole product A·(·) of 2mn² flops."""
    m = check_int("stuck_example", "m", m, minimum=1)
    n = check_int("stuck_example", "n", n, minimum=1)
    a, b, c, d = Var("A", (m, n)), Var("B", (n, n)), Var("C", (n, n)), Var("D", (n, n))
    return (a @ b) @ c + a @ d
