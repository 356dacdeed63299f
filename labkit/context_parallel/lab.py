"""The Lab 14 notebook's one-liners, and its "check your work" pictures.

    blockwise(scale)            attention one block at a time vs at once; exp() without the running max
    equivalence_table(worlds)   ring and Ulysses vs full attention: outputs, gradients, bytes = closed forms
    bytes_table(worlds)         bytes per rank of ring vs Ulysses, counted and closed-form, and predicted
    causal_work_table(world)    FLOPs per rank (FlopCounterMode) of causal ring attention, contiguous vs zig-zag
    torch_context_parallel()    PyTorch's own context_parallel against ours where it runs (CUDA), else why not
    placement_table(), mesh_table(), mlp_table()   sharding specs: our rule vs DTensor, 1-D vs 2-D bytes
    router_table()              MoE router trained with and without the balance and z losses
    picture(exercise)           a learner's function run through the lab's picture

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters).
"""
from __future__ import annotations

import itertools
import types

import torch

from labkit.collectives.counting import count_collectives
from labkit.context_parallel import formulas
from labkit.context_parallel.attention import reference_attention, softmax_step
from labkit.context_parallel.layout import shard, unshard
from labkit.context_parallel.ring import ring_attention
from labkit.context_parallel.ulysses import ulysses_attention
from labkit.dist import RankError, launch
from labkit.table import Table

SHAPE = (1, 4, 16, 8)          # (B, H, S, D) of the notebook's attention runs


def _qkv(shape=SHAPE, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, dtype=torch.float64, generator=g) for _ in range(4)]    # q, k, v, upstream


# --------------------------------------------------------------------------- one block at a time
def blockwise(blocks: int = 4, keys: int = 8, seed: int = 0, step=softmax_step) -> dict:
    """One query row's attention over ``blocks`` blocks of ``keys`` keys whose scores rise from
    block to block (10·N(0, 1) + 40·j: the maximum grows at every block), by the online softmax
    (``step``) block by block and by torch.softmax at once (float64), and the plain sum of
    exp(score) in float32. Returns {"states": [(m, l) after each block], "online", "at_once",
    "max_diff", "naive_sum"}."""
    g = torch.Generator().manual_seed(seed)
    scores = [10 * torch.randn(1, keys, dtype=torch.float64, generator=g) + 40 * j for j in range(blocks)]
    values = [torch.randn(keys, 3, dtype=torch.float64, generator=g) for _ in range(blocks)]
    state = (torch.full((1,), float("-inf"), dtype=torch.float64), torch.zeros(1, dtype=torch.float64),
             torch.zeros(1, 3, dtype=torch.float64))
    states = []
    for s, v in zip(scores, values):
        state = step(*state, s, v)
        states.append((float(state[0]), float(state[1])))
    online = state[2] / state[1][..., None]
    at_once = torch.softmax(torch.cat(scores, -1), -1) @ torch.cat(values, 0)
    naive = sum(torch.exp(s.float()).sum() for s in scores).item()
    return {"states": states, "online": online, "at_once": at_once,
            "max_diff": (online - at_once).abs().max().item(), "naive_sum": naive}


# --------------------------------------------------------------------------- ring and Ulysses, checked
def _cp_rank(rank, world, method, causal, layout, shape, seed):
    q, k, v, up = _qkv(shape, seed)
    mine = [shard(t, world, layout)[rank].clone().requires_grad_() for t in (q, k, v)]
    fn = ring_attention if method == "ring" else ulysses_attention
    stats: dict = {}
    with count_collectives() as fwd:
        out = fn(*mine, causal=causal, layout=layout, stats=stats)
    with count_collectives() as bwd:
        (out * shard(up, world, layout)[rank]).sum().backward()
    return {"out": out.detach(), "grads": [t.grad for t in mine], "fwd": sum(c.bytes_sent for c in fwd),
            "bwd": sum(c.bytes_sent for c in bwd), "score_elements": stats.get("score_elements", 0)}


def run_context_parallel(method: str, world: int, causal: bool, layout: str = "contiguous", shape=SHAPE,
                         seed: int = 0) -> dict:
    """``method`` ("ring" or "ulysses") on ``world`` gloo ranks against full attention: {"err_out",
    "err_grad" (max |difference|, float64), "fwd", "bwd" (bytes rank 0 sent, counted),
    "score_elements" (per rank)}."""
    q, k, v, up = _qkv(shape, seed)
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    want = reference_attention(*full, causal)
    (want * up).sum().backward()
    res = launch(_cp_rank, world, method, causal, layout, shape, seed, backend="gloo", timeout=120, quiet=True)
    err_out = (unshard([r["out"] for r in res], layout) - want.detach()).abs().max().item()
    err_grad = max((unshard([r["grads"][i] for r in res], layout) - full[i].grad).abs().max().item() for i in range(3))
    return {"err_out": err_out, "err_grad": err_grad, "fwd": res[0]["fwd"], "bwd": res[0]["bwd"],
            "score_elements": [r["score_elements"] for r in res]}


def equivalence_table(worlds=(1, 2, 4), shape=SHAPE) -> Table:
    """Ring and Ulysses attention on N gloo ranks vs full attention in one process (float64):
    outputs and gradients, and the bytes rank 0 sent next to the closed forms."""
    b, h, s, d = shape
    rows = []
    for method, causal, n in itertools.product(("ring", "ulysses"), (False, True), worlds):
        r = run_context_parallel(method, n, causal, shape=shape)
        f = (formulas.ring_bytes if method == "ring" else formulas.ulysses_bytes)(b, h, s, d, n, 8)
        rows.append((method, "yes" if causal else "no", n, r["err_out"], r["err_grad"], int(r["fwd"]), f["forward"],
                     int(r["bwd"]), f["backward"]))
    return Table(["method", "causal", "ranks", "out err", "grad err", "fwd bytes", "formula", "bwd bytes", "formula"],
                 rows, formats={"out err": ".0e", "grad err": ".0e"},
                 title=f"(B, H, S, D) = {shape}, float64; bytes rank 0 sent, counted vs closed form")


def bytes_table(worlds=(2, 4), predicted=(8, 16, 64), shape=(1, 64, 4096, 128), itemsize: int = 2) -> Table:
    """Bytes one rank sends per layer, forward + backward, for a sequence of S tokens: ring vs
    Ulysses from the closed forms (the rows for ``worlds`` are the ones the previous table
    counted on real ranks at a small size). Default: 64 heads of 128, 4096 tokens, bf16."""
    b, h, s, d = shape
    rows = []
    for n in (*worlds, *predicted):
        ring, uly = formulas.ring_bytes(b, h, s, d, n, itemsize), formulas.ulysses_bytes(b, h, s, d, n, itemsize)
        rt, ut = ring["forward"] + ring["backward"], uly["forward"] + uly["backward"]
        rows.append((n, rt / 2**20, ut / 2**20, rt / ut, "yes" if h % n == 0 else "no: N > H"))
    return Table(["ranks", "ring MiB", "Ulysses MiB", "ring / Ulysses", "Ulysses possible"], rows,
                 formats={"ring MiB": ".1f", "Ulysses MiB": ".1f", "ring / Ulysses": ".2f"},
                 title=f"per rank and layer, fwd + bwd: B={b}, H={h}, S={s}, D={d}, {itemsize}-byte elements")


def _flops_rank(rank, world, layout, shape, seed):
    from torch.utils.flop_counter import FlopCounterMode

    q, k, v, _ = _qkv(shape, seed)
    mine = [shard(t, world, layout)[rank] for t in (q, k, v)]
    with FlopCounterMode(display=False) as counter:
        ring_attention(*mine, causal=True, layout=layout)
    return counter.get_total_flops()


def causal_work_table(world: int = 4, shape=(1, 2, 64, 8)) -> Table:
    """FLOPs each rank spends in causal ring attention's forward (FlopCounterMode, measured on the
    ranks), with contiguous and zig-zag chunks; max/mean is how much longer the slowest rank takes."""
    b, h, s, d = shape
    rows = []
    for layout in ("contiguous", "zigzag"):
        flops = launch(_flops_rank, world, layout, shape, 0, backend="gloo", timeout=120, quiet=True)
        predicted = [4 * d * formulas.score_elements(r, world, s, True, layout, b, h) for r in range(world)]
        rows.append((layout, flops, predicted, max(flops) / (sum(flops) / world)))
    return Table(["chunks", "FLOPs per rank (measured)", "4·D·score entries", "max / mean"], rows,
                 formats={"max / mean": ".2f"}, title=f"causal ring attention forward, {world} ranks, "
                                                      f"(B, H, S, D) = {shape}")


# --------------------------------------------------------------------------- PyTorch's context_parallel
def _torch_cp_rank(rank, world, shape, seed):
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    from labkit.dist import device

    dev = device()
    q, k, v, _ = (t.to(dev, torch.float32) for t in _qkv(shape, seed))   # CUDA attention kernels: no float64
    mesh = init_device_mesh(dev.type, (world,))
    buffers = [t.clone() for t in (q, k, v)]
    with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2]):
        theirs = F.scaled_dot_product_attention(*buffers, is_causal=True)
    ours = ring_attention(*(shard(t, world, "zigzag")[rank] for t in (q, k, v)), causal=True, layout="zigzag")
    return (theirs.float() - ours.float()).abs().max().item()


def torch_context_parallel(world: int = 2, shape=(1, 4, 32, 16)) -> str:
    """PyTorch's ``torch.distributed.tensor.experimental.context_parallel`` (a ring, with its
    round-robin load balancing) against our zig-zag ring, where it can run: CUDA GPUs with NCCL.
    One line: the largest difference, or why it cannot run here."""
    if not (torch.cuda.is_available() and torch.cuda.device_count() >= world):
        return (f"PyTorch's context_parallel needs {world} CUDA GPUs: torch {torch.__version__.split('+')[0]} "
                "shards only CUDA's\nattention kernels (on CPU it says 'no sharding strategy registered')")
    errs = launch(_torch_cp_rank, world, shape, 0, backend="nccl", timeout=180, quiet=True)
    return f"PyTorch's context_parallel vs our zig-zag ring on {world} GPUs: max |difference| {max(errs):.1e}"


# --------------------------------------------------------------------------- sharding specs
MATMUL = "mk,kn->mn"
PLACEMENTS = ("R", "P", "S(0)", "S(1)")


def _dtensor(cases, mesh_shape):
    from labkit.sharding.dtensor import run_cases

    world = 1
    for n in mesh_shape:
        world *= n
    return launch(run_cases, world, mesh_shape, cases, backend="gloo", timeout=240, quiet=True)[0]


def placement_table(rule=None) -> Table:
    """Every pair of placements of A (m, k) and B (k, n) for A @ B on a (2,) mesh of gloo ranks:
    DTensor's output placement and the collectives it ran (CommDebugMode), next to ``rule``
    (default: labkit's `einsum_placement`)."""
    from labkit.sharding.rules import einsum_placement

    rule = rule or einsum_placement
    pairs = list(itertools.product(PLACEMENTS, PLACEMENTS))
    answers = _dtensor([(MATMUL, (a,), (b,), (8, 8), (8, 8), 0) for a, b in pairs], (2,))
    rows = []
    for (a, b), ans in zip(pairs, answers):
        moved = ", ".join(f"{k} x{v}" for k, v in sorted(ans["counts"].items())) or "-"
        mine = rule(MATMUL, a, b)
        agree = (mine is None) == bool(ans["counts"]) and (mine is None or (mine,) == ans["out"])
        rows.append((a, b, ans["out"][0], moved, str(mine), "yes" if agree else "NO"))
    return Table(["A", "B", "DTensor out", "DTensor collectives", "rule", "agree"], rows,
                 title="A @ B on 2 gloo ranks: A is (m, k), B is (k, n); rule None = must redistribute")


MESH_CASES = ((MATMUL, ("R", "S(1)"), ("S(1)", "S(0)")), (MATMUL, ("S(0)", "S(1)"), ("S(1)", "S(0)")),
              ("bmk,bkn->bmn", ("S(0)", "S(2)"), ("S(0)", "S(1)")), ("bsh,hf->bsf", ("S(0)", "S(2)"), ("R", "S(0)")),
              (MATMUL, ("S(1)", "S(1)"), ("R", "S(0)")), ("bsh,hf->bsf", ("S(2)", "R"), ("R", "S(0)")))
SHAPES = {MATMUL: ((8, 8), (8, 8)), "bmk,bkn->bmn": ((4, 8, 8), (4, 8, 8)), "bsh,hf->bsf": ((4, 8, 8), (8, 8))}


def mesh_table(cases=MESH_CASES) -> Table:
    """A few einsums on a 2 x 2 mesh of gloo ranks: DTensor's output placements and collectives
    next to labkit's `propagate` (the per-dimension rule plus the condition that cuts line up)."""
    from labkit.sharding.rules import propagate

    answers = _dtensor([(eq, a, b, *SHAPES[eq], 0) for eq, a, b in cases], (2, 2))
    rows = []
    for (eq, a, b), ans in zip(cases, answers):
        moved = ", ".join(f"{k} x{v}" for k, v in sorted(ans["counts"].items())) or "-"
        mine = propagate(eq, a, b)
        agree = (mine is None) == bool(ans["counts"]) and (mine is None or mine == ans["out"])
        rows.append((eq, " ".join(a), " ".join(b), " ".join(ans["out"]), moved, " ".join(mine or ["None"]),
                     "yes" if agree else "NO"))
    return Table(["einsum", "A", "B", "DTensor", "collectives", "propagate", "agree"], rows,
                 title="on a 2 x 2 mesh (placements: mesh dimension 0, then 1)")


def mlp_table(m: int = 16, h: int = 8, f: int = 32, predicted=(4, 5, 8, 16)) -> Table:
    """y = gelu(x·W1)·W2 on 4 gloo ranks with DTensor: 1-D tensor parallelism (4,) vs 2-D (2, 2):
    bytes rank 0 sent (CommBytesMode) vs the closed forms, the largest difference from one
    process, and the elements of x each rank holds; then the closed forms on n x n meshes."""
    from labkit.sharding import mlp

    rows = []
    for scheme in mlp.SCHEMES:
        r = launch(mlp.mlp_rank, 4, scheme, m, h, f, backend="gloo", timeout=120, quiet=True)[0]
        want = mlp.bytes_1d(m, h, 4) if scheme == "1-D" else mlp.bytes_2d(m, h, f, 2, 2)
        moved = ", ".join(f"{k.replace('_into_tensor', '').replace('_tensor', '')} x{v}"
                          for k, v in sorted(r["counts"].items()))
        rows.append((f"{scheme} on 4 ranks", int(r["bytes"]), int(want), f"{r['err']:.0e}", r["x_local"], moved))
    for n in predicted:
        rows.append((f"2-D on {n} x {n}", "-", int(mlp.bytes_2d(m, h, f, n, n)), "-", m * h // n,
                     f"1-D on {n * n}: {mlp.bytes_1d(m, h, n * n):.0f} bytes"))
    return Table(["layout", "bytes sent", "closed form", "err", "x elems", "collectives"], rows,
                 title=f"MLP forward, m={m} tokens, h={h}, f={f}, float64; rows below the measured two: "
                       "closed forms only")


# --------------------------------------------------------------------------- MoE router balance
ROUTER_RUNS = ((0.0, 0.0), (0.01, 0.0), (0.1, 0.0), (0.0, 1e-3), (0.01, 1e-3))


def router_runs(runs=ROUTER_RUNS):
    """`router_training.train_router` for each (α, β): the BalanceRun results, in order."""
    from labkit.tensor_parallel.router_training import train_router

    return [train_router(alpha=a, beta=b) for a, b in runs]


def router_table(results) -> Table:
    """The runs of `router_runs`: choices per expert, max/mean, CV, dropped at 1.0 and 1.25, losses."""
    rows = [(r.alpha, r.beta, " ".join(map(str, r.load)), r.max_over_mean, r.cv, r.dropped[1.0], r.dropped[1.25],
             r.task_loss, r.z_loss) for r in results]
    return Table(["α", "β", "choices per expert", "max/mean", "CV", "drop@1.0", "drop@1.25", "task", "z"], rows,
                 formats={"max/mean": ".2f", "CV": ".2f", "drop@1.0": ".1%", "drop@1.25": ".1%", "task": ".3f",
                          "z": ".1f"},
                 title="8 experts, top-2, 256 held-out tokens; α: balance loss, β: z-loss")


# --------------------------------------------------------------------------- check your work
def _verdict(err: float) -> str:
    return f"max |difference| {err:.1e} -> {'equal' if err < 1e-12 else 'DIFFERENT'}"


def softmax_picture(fn):
    """Your ``softmax_step`` over 4 blocks of scores ~1000 (exp overflows without the running
    maximum), and over blocks where a row sees only masked keys at first."""
    r = blockwise(step=fn)
    for j, (m, l) in enumerate(r["states"]):
        print(f"after block {j + 1}: m = {m:9.2f}, l = {l:.4f}")
    print(f"blocks vs softmax at once: {_verdict(r['max_diff'])}")
    g = torch.Generator().manual_seed(1)
    s1 = torch.full((2, 3), float("-inf"), dtype=torch.float64)
    s1[1] = torch.randn(3, dtype=torch.float64, generator=g)
    s2 = torch.randn(2, 3, dtype=torch.float64, generator=g)
    v1, v2 = (torch.randn(3, 2, dtype=torch.float64, generator=g) for _ in range(2))
    state = (torch.full((2,), float("-inf"), dtype=torch.float64), torch.zeros(2, dtype=torch.float64),
             torch.zeros(2, 2, dtype=torch.float64))
    state = fn(*fn(*state, s1, v1), s2, v2)
    want = torch.softmax(torch.cat([s1, s2], -1), -1) @ torch.cat([v1, v2])
    got = state[2] / state[1][..., None]
    err = float("nan") if torch.isnan(got).any() else (got - want).abs().max().item()
    print(f"row 0 masked in block 1: {'NaN' if err != err else _verdict(err)}")


def all_to_all_picture(fn, world: int = 2):
    """Your ``all_to_all_4d`` on 2 ranks: shapes both ways, and Ulysses attention built on it."""
    from labkit.context_parallel.check import all_to_all_rank, ulysses_rank

    shim = types.SimpleNamespace(all_to_all_4d=fn)
    x = torch.arange(world * 1 * 4 * 4 * 2, dtype=torch.float64).view(world, 1, 4, 4, 2)
    cases = [{"x": x, "scatter": 1, "gather": 2}]
    try:
        per_rank = launch(all_to_all_rank, world, shim, cases, backend="gloo", timeout=60, quiet=True)
        q, k, v, up = _qkv((1, 4, 8, 3), 5)
        res = launch(ulysses_rank, world, shim, {"q": q, "k": k, "v": v, "up": up, "causal": True},
                     backend="gloo", timeout=60, quiet=True)
    except RankError as e:
        if e.exc_type == "NotImplementedError":
            raise NotImplementedError("all_to_all_4d") from None
        raise
    for rank, (r,) in enumerate(per_rank):
        want = torch.cat([x[j].chunk(world, dim=1)[rank] for j in range(world)], dim=2)
        ok = isinstance(r["y"], torch.Tensor) and r["y"].shape == want.shape and torch.equal(r["y"], want)
        print(f"rank {rank}: (1, 4, 4, 2) heads -> sequence gives {tuple(r['y'].shape)}: "
              f"{'right pieces' if ok else 'WRONG pieces'}")
    full = reference_attention(q, k, v, True)
    err = max((r["y"] - full.chunk(world, dim=2)[i]).abs().max().item() for i, r in enumerate(res))
    print(f"Ulysses attention with your exchange vs full attention: {_verdict(err)}")


def placement_picture(fn):
    """Your ``einsum_placement`` next to DTensor's choices for every pair of placements of a matmul."""
    print(placement_table(rule=fn))


def balance_picture(fn):
    """Your ``load_balancing_loss`` on a uniform and on a skewed router, with its gradient."""
    from labkit.tensor_parallel.experts import load_balancing_loss

    g = torch.Generator().manual_seed(0)
    for name, bias in (("uniform-ish router", 0.0), ("skewed router", 4.0)):
        z = torch.randn(64, 8, dtype=torch.float64, generator=g)
        z[:, 0] += bias
        z.requires_grad_()
        loss = fn(z, 2)
        loss.backward()
        want = load_balancing_loss(z.detach(), 2).item()
        grad = "none" if z.grad is None else f"{z.grad.abs().max().item():.2e}"
        print(f"{name}: yours {float(loss.detach()):.6f}, formula {want:.6f}; largest |gradient| {grad}")


def picture(exercise: str):
    """The ``picture(fn)`` for `check_your_work` of one exercise of exercises/lab14_long_context.py."""
    return {"softmax_step": softmax_picture, "all_to_all_4d": all_to_all_picture,
            "einsum_placement": placement_picture, "load_balancing_loss": balance_picture}[exercise]
