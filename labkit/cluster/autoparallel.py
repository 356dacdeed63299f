"""Auto-parallel search on a chain of layers: exact dynamic programmes, checked by brute force.

(a) Pipeline stage partitioning. Cut a chain of n layers with costs c_0..c_{n−1} (seconds) into
    p contiguous stages minimising the slowest stage (the bottleneck sets a pipeline's
    throughput). Exact DP over (stages used, layers left), O(p·n²):

        best(k, i) = min over j in i+1..n−k+1 of max(cost(i, j), best(k−1, j)),  best(1, i) = cost(i, n)

    where cost(i, j) = c_i + … + c_{j−1}. `partition_stages` is the graded function; its
    contract is in its docstring. `measure_layer_costs` times each piece of a `labkit.model.GPT`
    (embedding, each block, head) forward + backward on this machine, to partition real costs.

(b) Per-layer sharding of a chain of linear layers Y = X·W on t devices (the idea of Alpa's
    intra-operator pass, Zheng et al., OSDI 2022, on a chain instead of a graph). Each layer
    picks one of

        choice      W is                    input X must be        output Y comes out
        replicate   whole on every device   R (replicated)         R
        column      split by columns        R                      S (split on the last dim)
        row         split by rows           S                      P (partial sums)

    and a layout mismatch costs a collective (ring α–β times from labkit.collectives):

        S → R all-gather,  P → R all-reduce,  P → S reduce-scatter,  R → S and equal: nothing.

    With ``training=True`` gradients flow back too, with layouts of their own: a replicated
    layer needs dY replicated and returns dX replicated; a column layer needs dY split and
    returns dX as partial sums; a row layer needs dY replicated and returns dX split. The same
    table prices the conversions (so column → row costs nothing either way, and the all-reduce
    that a column layer's input gradient needs is Megatron's f operator). The chain's input and
    output are replicated, and so are their gradients; an elementwise nonlinearity between layers
    commutes with R and S (no layer accepts P, so it never sees partial sums). Compute: 2·tokens·
    d_in·d_out flops forward (×3 with backward), divided by t unless replicated.

    The cost of a choice sequence is a sum of terms that each depend on two neighbouring
    choices, so an exact DP over the chain with the previous choice as state finds the optimum
    in O(3²·n); `brute_force_sharding` checks it over all 3ⁿ sequences. For a Megatron MLP
    (h → 4h → h) it recovers column-then-row (Shoeybi et al., 2019): one all-reduce forward,
    one backward. `megatron_rule` is the simple rule (column, row, column, row, …) to compare.
"""
from __future__ import annotations

import itertools
import math
import numbers
import statistics
import time
from dataclasses import dataclass, field

from labkit.checks import MAX_ENUMERATED, check_int, check_real
from labkit.collectives.alpha_beta import predict_time

# ---------------------------------------------------------------- (a) stage partitioning


def _check_costs(fn: str, costs) -> list[float]:
    try:
        seq = list(costs)
    except TypeError:
        raise TypeError(f"{fn}: costs must be a sequence of positive numbers, got {type(costs).__name__}") from None
    if not seq:
        raise ValueError(f"{fn}: costs must not be empty")
    out = []
    for i, c in enumerate(seq):
        if isinstance(c, bool) or not isinstance(c, numbers.Real):
            raise TypeError(f"{fn}: costs[{i}] must be a real number, got {type(c).__name__} {c!r}")
        c = float(c)
        if not math.isfinite(c) or c <= 0:
            raise ValueError(f"{fn}: costs[{i}] must be a finite positive number, got {c!r}")
        out.append(c)
    return out


def _block_sums(c: list[float]) -> list[list[float]]:
    """S[i][j] = math.fsum(c[i:j]) (correctly rounded, so independent of summation order)."""
    n = len(c)
    return [[math.fsum(c[i:j]) if j > i else 0.0 for j in range(n + 1)] for i in range(n + 1)]


def _best_split(S, best_next, i: int, lo: int, hi: int) -> float:
    """min over j in lo..hi of max(S[i][j], best_next[j]) in O(log n): S[i][j] never falls as j grows
    (positive costs, correctly rounded sums) and best_next[j] never rises (fewer layers on as many
    stages), so the minimum of their max sits where they cross — at the first j with
    S[i][j] >= best_next[j] or just before it. Every other j is at least as large there, so the
    value is exactly the brute-force minimum (tests/test_cluster_autoparallel.py compares them)."""
    a, b = lo, hi
    while a < b:                                   # first j with S[i][j] >= best_next[j] (or hi)
        mid = (a + b) // 2
        if S[i][mid] >= best_next[mid]:
            b = mid
        else:
            a = mid + 1
    value = max(S[i][a], best_next[a])
    if a > lo:
        value = min(value, max(S[i][a - 1], best_next[a - 1]))
    return value


# BEGIN SOLUTION (labkit's checked, bisecting DP: it answers partition_stages)
def partition_stages(costs, stages: int) -> tuple[list[int], float]:
    """Split a chain of layers into ``stages`` contiguous pipeline stages minimising the slowest stage.

    Inputs: ``costs`` — a non-empty sequence of finite positive real numbers, costs[i] = seconds
    of layer i (ints allowed; bools are not); ``stages`` — an int with 1 <= stages <= len(costs)
    (every stage holds at least one layer; more stages than layers is a one-line ValueError).

    Returns ``(sizes, bottleneck)``:
      sizes — a list of ``stages`` positive ints summing to len(costs); stage k holds layers
        sum(sizes[:k]) .. sum(sizes[:k+1]) − 1, in order (stage lengths, not boundaries);
      bottleneck — a float, the largest stage cost, max over k of math.fsum(costs of stage k),
        which is the smallest possible over all contiguous partitions.
    Ties: among all partitions achieving that bottleneck, the one whose sizes list is
    lexicographically largest — earlier stages as long as possible (e.g. 5 equal layers on 2
    stages give [3, 2], not [2, 3]).
    Stage costs are summed with math.fsum (correctly rounded), so they do not depend on the
    order of summation and comparisons between partitions are exact.
    Exact DP (see the module docstring); each min over the first stage's end is found by
    bisection (`_best_split`), O(stages·n·log n) after the O(n²) block sums.
    """
    c = _check_costs("partition_stages", costs)
    p = check_int("partition_stages", "stages", stages, minimum=1)
    n = len(c)
    if p > n:
        raise ValueError(f"partition_stages: stages ({p}) must be <= len(costs) ({n}): every stage needs a layer")
    S = _block_sums(c)
    # best[k][i]: smallest bottleneck for layers i..n-1 on k stages (k <= n - i)
    best = [[math.inf] * (n + 1) for _ in range(p + 1)]
    for i in range(n):
        best[1][i] = S[i][n]
    for k in range(2, p + 1):
        for i in range(n - k + 1):
            best[k][i] = _best_split(S, best[k - 1], i, i + 1, n - k + 1)
    bottleneck = best[p][0]
    sizes, i = [], 0
    for k in range(p, 1, -1):           # longest first stage that still allows the optimum
        j = max(j for j in range(i + 1, n - k + 2) if S[i][j] <= bottleneck and best[k - 1][j] <= bottleneck)
        sizes.append(j - i)
        i = j
    sizes.append(n - i)
    return sizes, bottleneck
# END SOLUTION


# BEGIN SOLUTION (the same answer by enumeration)
def brute_force_stages(costs, stages: int) -> tuple[list[int], float]:
    """`partition_stages` by trying every composition of len(costs) into ``stages`` positive parts
    (C(n−1, p−1) of them), with the same tie rule; for tests."""
    c = _check_costs("brute_force_stages", costs)
    p = check_int("brute_force_stages", "stages", stages, minimum=1, maximum=len(c))
    best = None
    for cuts in itertools.combinations(range(1, len(c)), p - 1):
        b = (0,) + cuts + (len(c),)
        sizes = [b[k + 1] - b[k] for k in range(p)]
        value = max(math.fsum(c[b[k]:b[k + 1]]) for k in range(p))
        if best is None or value < best[1] or (value == best[1] and sizes > best[0]):
            best = (sizes, value)
    return best
# END SOLUTION


@dataclass(frozen=True)
class StagePlan:
    """A stage partition: sizes (layers per stage), bounds (stage k = layers bounds[k]..bounds[k+1]−1),
    stage_costs (s, math.fsum of each stage), bottleneck (s), balance = mean / bottleneck."""

    sizes: list
    bounds: list
    stage_costs: list
    bottleneck: float
    balance: float


def plan_stages(costs, stages: int) -> StagePlan:
    """`partition_stages` with the stage bounds and costs spelled out."""
    c = _check_costs("plan_stages", costs)
    sizes, bottleneck = partition_stages(c, stages)
    bounds = [0]
    for s in sizes:
        bounds.append(bounds[-1] + s)
    stage_costs = [math.fsum(c[bounds[k]:bounds[k + 1]]) for k in range(len(sizes))]
    return StagePlan(sizes, bounds, stage_costs, bottleneck, math.fsum(stage_costs) / len(sizes) / bottleneck)


@dataclass(frozen=True)
class LayerCosts:
    """names: the pieces of the model in order ("embed", "block0", …, "head"); seconds: median
    forward + backward time of each (s) over ``repeats`` runs on this machine."""

    names: list
    seconds: list


def measure_layer_costs(cfg=None, batch_size: int = 8, repeats: int = 5, seed: int = 0,
                        threads: int = 1) -> LayerCosts:
    """Time each piece of ``labkit.model.GPT(cfg)`` forward + backward on the CPU: the embedding
    (token + position), each block, and the head (final LayerNorm, tied logits, cross-entropy).
    Each piece runs on its own on a detached input that requires grad (so backward reaches its
    input too), once to warm up and then ``repeats`` times; the median is kept. torch runs on
    ``threads`` threads meanwhile (1 by default: on a small, shared CPU a second thread's
    spin-waiting can make a millisecond op take a hundred). Default cfg:
    GPTConfig(layers=4, hidden=64, heads=4, seq_len=32, vocab=512)."""
    import torch
    import torch.nn.functional as F

    from labkit.model import GPT, GPTConfig, batch

    cfg = GPTConfig(layers=4, hidden=64, heads=4, seq_len=32, vocab=512) if cfg is None else cfg
    batch_size = check_int("measure_layer_costs", "batch_size", batch_size, minimum=1)
    repeats = check_int("measure_layer_costs", "repeats", repeats, minimum=1)
    model = GPT(cfg, seed=check_int("measure_layer_costs", "seed", seed))
    tokens, targets = batch(cfg, batch_size, seed=seed)
    pos = torch.arange(tokens.shape[1])
    with torch.no_grad():
        xs = [model.tok_emb(tokens) + model.pos_emb(pos)]                     # (B, T, H)
        for block in model.blocks:
            xs.append(block(xs[-1]))

    def embed():
        out = model.tok_emb(tokens) + model.pos_emb(pos)
        out.backward(torch.ones_like(out))

    def block_fn(i):
        def run():
            x = xs[i].clone().requires_grad_(True)
            y = model.blocks[i](x)
            y.backward(torch.ones_like(y))
        return run

    def head():
        x = xs[-1].clone().requires_grad_(True)
        logits = model.ln_f(x) @ model.tok_emb.weight.t()                    # (B, T, V)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).backward()

    pieces = [("embed", embed)] + [(f"block{i}", block_fn(i)) for i in range(cfg.layers)] + [("head", head)]
    names, seconds = [], []
    previous = torch.get_num_threads()
    torch.set_num_threads(check_int("measure_layer_costs", "threads", threads, minimum=1))
    try:
        for name, fn in pieces:
            times = []
            for r in range(repeats + 1):
                model.zero_grad(set_to_none=True)
                t0 = time.perf_counter()
                fn()
                if r:
                    times.append(time.perf_counter() - t0)
            names.append(name)
            seconds.append(statistics.median(times))
    finally:
        torch.set_num_threads(previous)
    return LayerCosts(names, seconds)


# ---------------------------------------------------------------- (b) sharding a linear chain

CHOICES = ("replicate", "column", "row")
_IN = {"replicate": "R", "column": "R", "row": "S"}          # layout the input must have
_OUT = {"replicate": "R", "column": "S", "row": "P"}         # layout the output comes out in
_GRAD_NEED = {"replicate": "R", "column": "S", "row": "R"}   # layout of dY the layer needs
_GRAD_OUT = {"replicate": "R", "column": "P", "row": "S"}    # layout of dX it returns
_CONVERT = {("S", "R"): "ring_all_gather", ("P", "R"): "ring_all_reduce", ("P", "S"): "ring_reduce_scatter"}


@dataclass(frozen=True)
class ShardingProblem:
    """A chain of linear layers: layer i maps dims[i] → dims[i+1] features for ``tokens`` rows;
    ``devices`` = t; link (alpha s, beta s/byte); ``flops_per_s`` per device; activations of
    ``bytes_per_element`` bytes; ``training``: include the backward pass."""

    dims: tuple
    tokens: int
    devices: int
    alpha: float
    beta: float
    flops_per_s: float
    bytes_per_element: int = 2
    training: bool = True

    def __post_init__(self):
        fn = "ShardingProblem"
        if len(self.dims) < 2:
            raise ValueError(f"{fn}: dims must list at least 2 sizes (one layer), got {self.dims!r}")
        for d in self.dims:
            check_int(fn, "dims[i]", d, minimum=1)
        check_int(fn, "tokens", self.tokens, minimum=1)
        check_int(fn, "devices", self.devices, minimum=1)
        check_int(fn, "bytes_per_element", self.bytes_per_element, minimum=1)
        if check_real(fn, "alpha", self.alpha) < 0 or check_real(fn, "beta", self.beta) < 0:
            raise ValueError(f"{fn}: alpha and beta must be >= 0")
        check_real(fn, "flops_per_s", self.flops_per_s, positive=True)

    @property
    def layers(self) -> int:
        return len(self.dims) - 1


def _convert(prob: ShardingProblem, have: str, need: str, features: int) -> tuple[float, str | None, float]:
    """(seconds, collective or None, bytes) to turn a (tokens, features) tensor from ``have`` into ``need``."""
    if have == need or (have, need) == ("R", "S"):
        return 0.0, None, 0.0
    algorithm = _CONVERT[(have, need)]
    nbytes = float(prob.tokens * features * prob.bytes_per_element)
    return predict_time(algorithm, prob.devices, nbytes, prob.alpha, prob.beta), algorithm[5:], nbytes


def _step(prob: ShardingProblem, i: int, prev: str | None, choice: str, log: list | None = None) -> float:
    """Cost (s) of layer i with ``choice`` after layer i−1 chose ``prev`` (None: the chain input),
    plus, for the last layer, turning its output (and the incoming gradient) into replicated."""
    terms = []

    def add(where, have, need, feats):
        sec, op, nbytes = _convert(prob, have, need, feats)
        if op is not None:
            terms.append(sec)
            if log is not None:
                log.append((where, op, nbytes, sec))

    have = "R" if prev is None else _OUT[prev]
    add(f"forward into layer {i}", have, _IN[choice], prob.dims[i])
    if prob.training:
        need = "R" if prev is None else _GRAD_NEED[prev]
        add(f"backward out of layer {i}", _GRAD_OUT[choice], need, prob.dims[i])
    flops = 2.0 * prob.tokens * prob.dims[i] * prob.dims[i + 1] * (3 if prob.training else 1)
    compute = flops / prob.flops_per_s / (1 if choice == "replicate" else prob.devices)
    terms.append(compute)
    if log is not None:
        log.append((f"layer {i} compute", "compute", 0.0, compute))
    if i == prob.layers - 1:
        add("forward chain output", _OUT[choice], "R", prob.dims[i + 1])
        if prob.training:
            add("backward chain output", "R", _GRAD_NEED[choice], prob.dims[i + 1])
    total = 0.0
    for x in terms:
        total += x
    return total


@dataclass(frozen=True)
class ShardingPlan:
    """choices: one of CHOICES per layer; cost_s: total model time (s); comm_s, compute_s: its
    parts; collectives: (where, op, bytes, seconds) for every non-free conversion and compute."""

    choices: tuple
    cost_s: float
    comm_s: float
    compute_s: float
    collectives: list = field(repr=False)


def sharding_cost(prob: ShardingProblem, choices) -> ShardingPlan:
    """Evaluate one choice per layer (summed left to right, layer by layer)."""
    choices = tuple(choices)
    if len(choices) != prob.layers or any(c not in CHOICES for c in choices):
        raise ValueError(f"sharding_cost: choices must be {prob.layers} of {', '.join(CHOICES)}, got {choices!r}")
    log: list = []
    total = 0.0
    for i, c in enumerate(choices):
        total += _step(prob, i, choices[i - 1] if i else None, c, log)
    compute = math.fsum(s for _, op, _, s in log if op == "compute")
    return ShardingPlan(choices, total, math.fsum(s for _, op, _, s in log if op != "compute"), compute, log)


def plan_sharding(prob: ShardingProblem) -> ShardingPlan:
    """The cheapest choice sequence, by DP over the chain (state: the previous layer's choice).

    best[i][c] = (cost, choices) of the cheapest way to run layers 0..i with layer i on c; costs
    are accumulated left to right exactly as `sharding_cost` does. Ties go to the
    lexicographically smallest sequence in CHOICES order (replicate < column < row).
    """
    if not isinstance(prob, ShardingProblem):
        raise TypeError(f"plan_sharding: prob must be a ShardingProblem, got {type(prob).__name__}")
    idx = range(len(CHOICES))           # choices as indices, so tuples compare in CHOICES order
    best = {c: (_step(prob, 0, None, CHOICES[c]), (c,)) for c in idx}
    for i in range(1, prob.layers):
        best = {c: min((best[p][0] + _step(prob, i, CHOICES[p], CHOICES[c]), best[p][1] + (c,)) for p in idx)
                for c in idx}
    _, seq = min(best.values())
    return sharding_cost(prob, [CHOICES[c] for c in seq])


def brute_force_sharding(prob: ShardingProblem) -> ShardingPlan:
    """`plan_sharding` by evaluating all 3ⁿ sequences (n <= 10), same tie rule; for tests."""
    if prob.layers > 10:
        raise ValueError(f"brute_force_sharding: 3^{prob.layers} sequences is too many (n <= 10)")
    best = min((sharding_cost(prob, [CHOICES[c] for c in seq]).cost_s, seq)
               for seq in itertools.product(range(len(CHOICES)), repeat=prob.layers))
    return sharding_cost(prob, [CHOICES[c] for c in best[1]])


def megatron_rule(layers: int) -> tuple:
    """The simple rule: pair layers as column then row (Megatron's MLP pattern); an odd last
    layer is column-parallel (its output gathered at the end)."""
    layers = check_int("megatron_rule", "layers", layers, minimum=1, maximum=MAX_ENUMERATED)
    return tuple(("column", "row")[i % 2] if i < layers - layers % 2 else "column" for i in range(layers))


def _partition_stages(costs, stages):
    """Cut a chain of layers into ``stages`` contiguous pipeline stages so that the slowest stage
    (the sum of its layers' costs) is as fast as possible.

    costs: a non-empty list of positive floats, costs[i] = seconds of layer i; stages: an int,
    1 <= stages <= len(costs) (every stage gets at least one layer).
    Returns (sizes, bottleneck): sizes — a list of ``stages`` positive ints summing to
    len(costs), the number of layers of each stage in order; bottleneck — the cost of the
    slowest stage (a float), the smallest any partition can achieve. Sum a stage's costs with
    math.fsum. Ties: among the partitions with that bottleneck return the one whose sizes list
    is lexicographically largest (earlier stages as long as possible; 5 equal layers on 2
    stages give [3, 2]).
    Dynamic programming: best(k, i) = the smallest bottleneck of layers i..n−1 on k stages
    = min over the first stage's end j of max(cost(i..j−1), best(k−1, j)).
    """
    # BEGIN SOLUTION
    # HINT: the best split of the remaining layers into the remaining stages does not depend on how
    # HINT: the first layers were split: dynamic programming, then a walk that reconstructs one
    # HINT: optimal split (ties go to the longest first stage).
    n, p = len(costs), stages

    def cost(i, j):
        return math.fsum(costs[i:j])

    best = [[math.inf] * (n + 1) for _ in range(p + 1)]
    for i in range(n):
        best[1][i] = cost(i, n)
    for k in range(2, p + 1):
        for i in range(n - k + 1):
            best[k][i] = min(max(cost(i, j), best[k - 1][j]) for j in range(i + 1, n - k + 2))
    bottleneck = best[p][0]
    sizes, i = [], 0
    for k in range(p, 1, -1):
        j = max(j for j in range(i + 1, n - k + 2) if cost(i, j) <= bottleneck and best[k - 1][j] <= bottleneck)
        sizes.append(j - i)
        i = j
    sizes.append(n - i)
    return sizes, bottleneck
    # END SOLUTION
