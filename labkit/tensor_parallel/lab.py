"""The Lab 07 notebook's one-liners, and its "check your work" pictures.

    model_table(worlds, sequence_parallel)   parallelize(GPT) vs the unsplit model; collectives counted
    pairing_table(worlds)                    Megatron's column→row pairing vs gathering in between
    sp_table(worlds)                         plain TP vs sequence parallel: bytes and saved activations
    moe_table(factors)                       capacity factor vs dropped tokens; expert parallel = one process
    picture(exercise)                        a learner's function run on 2 ranks next to the unsplit layer
    conv_table(worlds), conv_channel_table   a convolution split by rows (halo exchange) and by channels
    conv_cost_table(...)                     bytes moved and weights held per rank, both splits, big layer

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters).
"""
from __future__ import annotations

import types

import torch
from torch import nn

from labkit.dist import RankError, device, launch
from labkit.model import GPT, TENSOR_PARALLEL_GPT, GPTConfig, batch
from labkit.table import Table
from labkit.tensor_parallel.activations import saved_bytes
from labkit.tensor_parallel.comm import count_collectives
from labkit.tensor_parallel.experts import ExpertParallelMoE, MoE, MoEConfig, all_to_all_bytes, moe_reference
from labkit.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from labkit.tensor_parallel.parallelize import parallelize

B = 2


def _batch(cfg):
    return tuple(t.to(device()) for t in batch(cfg, B, seed=1))


def _model_rank(rank, world, cfg, sp):
    model = GPT(cfg, seed=0, dtype=torch.float64).to(device())
    tp = parallelize(model, sequence_parallel=sp)
    tokens, targets = _batch(cfg)
    with count_collectives() as fwd:
        _, loss = tp(tokens, targets)
    with count_collectives() as bwd:
        loss.backward()
        tp.sync_sequence_parallel_grads()
    return loss.item(), fwd, bwd


def model_table(worlds=(1, 2, 4), sequence_parallel: bool = False, cfg: GPTConfig = TENSOR_PARALLEL_GPT) -> Table:
    """Loss of parallelize(GPT) vs the unsplit model (float64) and the collectives of one step,
    counted: those of b·s·h elements, and the loss's small ones."""
    model = GPT(cfg, seed=0, dtype=torch.float64)
    want = model(*batch(cfg, B, seed=1))[1].item()
    bsh = B * cfg.seq_len * cfg.hidden
    rows = []
    for n in worlds:
        loss, fwd, bwd = launch(_model_rank, n, cfg, sequence_parallel, timeout=120)[0]
        big = lambda recs: [c for c in recs if c.numel == bsh]                    # noqa: E731
        names = sorted({c.op for c in big(fwd) + big(bwd)}) or ["-"]
        rows.append((n, abs(loss - want), len(big(fwd)), len(big(bwd)), len(fwd) - len(big(fwd)), "+".join(names)))
    return Table(["ranks", "|loss - unsplit|", "fwd b·s·h", "bwd b·s·h", "fwd small", "kind"], rows,
                 formats={"|loss - unsplit|": ".1e"},
                 title=f"{cfg.layers} layers, b·s·h = {bsh}; formula per step: 2L + 1 = {2 * cfg.layers + 1} "
                       f"each way" + (" of each kind" if sequence_parallel else ""))


def _pairing_rank(rank, world, b, s, h):
    torch.manual_seed(0)
    fc, proj = nn.Linear(h, 4 * h, dtype=torch.float64), nn.Linear(4 * h, h, dtype=torch.float64)
    x = torch.randn(b, s, h, dtype=torch.float64).to(device())
    fc, proj = fc.to(device()), proj.to(device())
    out = {}
    for name, (col, row) in {
        "column→row (Megatron)": (ColumnParallelLinear.from_linear(fc), RowParallelLinear.from_linear(proj)),
        "gather in between": (ColumnParallelLinear.from_linear(fc, gather_output=True),
                              RowParallelLinear.from_linear(proj, input_is_parallel=False)),
    }.items():
        with count_collectives() as recs:
            row(torch.nn.functional.gelu(col(x.clone().requires_grad_()))).sum().backward()
        short = {"all_reduce": "AR", "all_gather": "AG", "reduce_scatter": "RS"}
        out[name] = (sum(c.bytes_sent for c in recs), " ".join(f"{short[c.op]}({c.phase[0]})" for c in recs))
    return out


def pairing_table(worlds=(2, 4), b: int = 2, s: int = 8, h: int = 16) -> Table:
    """Bytes one rank sends for an MLP's forward + backward: Megatron's pairing vs all-gathering the
    (b, s, 4h) activation in between; formula 2·2(p−1)/p·S with S = b·s·h·8 bytes."""
    rows = []
    S = b * s * h * 8
    for p in worlds:
        res = launch(_pairing_rank, p, b, s, h, timeout=60)[0]
        for name, (sent, ops) in res.items():
            rows.append((p, name, int(sent), int(4 * (p - 1) / p * S), ops))
    return Table(["ranks", "split", "bytes sent", "2 all-reduces", "collectives"], rows,
                 title=f"(b, s, h) = ({b}, {s}, {h}), float64; AR all-reduce, AG all-gather, "
                       "(f) forward, (b) backward")


def _sp_rank(rank, world, cfg):
    out = {}
    for sp in (False, True):
        tp = parallelize(GPT(cfg, seed=0, dtype=torch.float64).to(device()), sequence_parallel=sp)
        with count_collectives() as recs:
            _, loss = tp(*_batch(cfg))
            loss.backward()
        ln = saved_bytes(tp, lambda: tp(*_batch(cfg)))
        out[sp] = (sum(c.bytes_sent for c in recs), ln)
    return out


def sp_table(worlds=(2, 4), cfg: GPTConfig = TENSOR_PARALLEL_GPT) -> Table:
    """Plain TP vs sequence parallel per rank: bytes sent in one step, and bytes the LayerNorms save
    for backward (measured with saved-tensor hooks)."""
    rows = []
    for n in worlds:
        res = launch(_sp_rank, n, cfg, timeout=60)[0]
        (b0, ln0), (b1, ln1) = res[False], res[True]
        rows.append((n, int(b0), int(b1), ln0, ln1, ln0 / ln1))
    return Table(["ranks", "TP bytes", "SP bytes", "LN saved, TP", "LN saved, SP", "ratio"], rows,
                 formats={"ratio": ".1f"}, title="one step per rank, float64 (SP bytes leave out the "
                                                 "small sum of replicated gradients)")


def _moe_rank(rank, world, cfg, tokens):
    x = torch.randn(world * tokens, cfg.hidden, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    x = x.to(device())
    layer = ExpertParallelMoE(MoE(cfg, seed=3).to(device()))
    y, dropped = layer(x[rank * tokens:(rank + 1) * tokens])
    want, _ = moe_reference(MoE(cfg, seed=3).to(device()), x, groups=world)
    return (y - want[rank * tokens:(rank + 1) * tokens]).abs().max().item(), dropped, layer.stats.get("bytes_sent", 0)


def moe_table(factors=(0.5, 1.0, 1.25, 2.0), world: int = 2, tokens: int = 32) -> Table:
    """Top-2 routing over 4 experts on ``world`` ranks: capacity, dropped choices (summed over ranks),
    the all-to-all bytes of one forward (counted and by formula), and the match with one process."""
    rows = []
    for f in factors:
        cfg = MoEConfig(hidden=16, experts=4, ffn=32, top_k=2, capacity_factor=f)
        res = launch(_moe_rank, world, cfg, tokens, timeout=60)
        rows.append((f, cfg.capacity(tokens), sum(r[1] for r in res), cfg.top_k * tokens * world,
                     res[0][2], 2 * all_to_all_bytes(cfg, tokens, world, 8), max(r[0] for r in res) < 1e-12))
    return Table(["capacity factor", "slots/expert", "dropped", "choices", "a2a bytes", "formula", "= 1 process"],
                 rows, title=f"{world} ranks x {tokens} tokens, 4 experts, top-2 (choices: top-k per token)")


# --------------------------------------------------------------------------- check your work

def _run_exercise(exercise: str, attr: str, fn, world: int = 2):
    """The ranks the grader's harness runs (`tensor_parallel.check`), on ``world`` ranks with the
    learner's function (the split layers run with the grader's f and g)."""
    from labkit.tensor_parallel.check import exercise_rank
    from labkit.tensor_parallel.comm import copy_to_tp, reduce_from_tp

    shim = types.SimpleNamespace(copy_to_tp=copy_to_tp, reduce_from_tp=reduce_from_tp)
    setattr(shim, attr, fn)
    g = lambda s, *shape: torch.randn(*shape, generator=torch.Generator().manual_seed(s), dtype=torch.float64)  # noqa: E731
    case = {"copy": {"x": g(0, 3, 4), "w": g(1, world, 3, 4)}, "reduce": {"x": g(0, 3, 4), "parts": g(2, world, 3, 4)},
            "column": {"x": g(3, 2, 3, 8), "weight": g(4, 8, 8), "bias": g(5, 8), "upstream": g(6, 2, 3, 8)},
            "ce": {"logits": 4 * g(7, 7, 12), "targets": torch.arange(7) * 5 % 12, "scale": 1.0}}
    case["row"] = case["column"]
    try:
        return case[exercise], launch(exercise_rank, world, shim, exercise, [case[exercise]], backend="gloo",
                                      timeout=60, quiet=True)
    except RankError as e:
        if e.exc_type == "NotImplementedError":
            raise NotImplementedError(attr) from None
        raise


def _verdict(what: str, err: float) -> str:
    return f"{what}: max |difference| {err:.1e} -> {'equal' if err < 1e-12 else 'DIFFERENT'}"


def conjugate_picture(fn, which: str):
    case, per_rank = _run_exercise("copy" if which == "copy_to_tp" else "reduce", which, fn)
    for rank, (res,) in enumerate(per_rank):
        if which == "copy_to_tp":
            fwd = (res["f_out"] - case["x"]).abs().max().item()
            bwd = (res["f_grad"] - case["w"].sum(0)).abs().max().item()
        else:
            fwd = (res["g_out"] - case["parts"].sum(0)).abs().max().item()
            bwd = (res["g_grad"] - case["x"]).abs().max().item()
        print(f"rank {rank}: " + _verdict("forward", fwd) + " | " + _verdict("backward", bwd))


def linear_picture(fn, which: str):
    case, per_rank = _run_exercise(which, f"{which}_parallel_linear", fn)
    x = case["x"].clone().requires_grad_()
    w, b = case["weight"].clone().requires_grad_(), case["bias"].clone().requires_grad_()
    y = torch.nn.functional.linear(x, w, b)
    (y * case["upstream"]).sum().backward()
    for rank, (res,) in enumerate(per_rank):
        if which == "column":
            want = (y.chunk(2, -1)[rank], x.grad, w.grad.chunk(2, 0)[rank])
        else:
            want = (y, x.grad.chunk(2, -1)[rank], w.grad.chunk(2, 1)[rank])
        errs = [(a - c).abs().max().item() if a is not None and a.shape == c.shape else float("inf")
                for a, c in zip((res["y"], res["x_grad"], res["w_grad"]), want)]
        print(f"rank {rank}: " + _verdict("output", errs[0]) + " | " + _verdict("grads", max(errs[1:])))


def ce_picture(fn):
    case, per_rank = _run_exercise("ce", "vocab_parallel_cross_entropy", fn)
    z = case["logits"].clone().requires_grad_()
    loss = torch.nn.functional.cross_entropy(z, case["targets"])
    loss.backward()
    for rank, (res,) in enumerate(per_rank):
        err = (res["z_grad"] - z.grad.chunk(2, 1)[rank]).abs().max().item()
        print(f"rank {rank}: loss {res['loss'].item():.6f} (unsplit {loss.item():.6f}), grads max |diff| "
              f"{err:.1e}, largest collective {max((c[1] for c in res['calls']), default=0)} numbers")


def picture(exercise: str):
    """The ``picture(fn)`` for `check_your_work` of one exercise of exercises/lab07_tensor_parallel.py."""
    return {"copy_to_tp": lambda fn: conjugate_picture(fn, "copy_to_tp"),
            "reduce_from_tp": lambda fn: conjugate_picture(fn, "reduce_from_tp"),
            "column_parallel_linear": lambda fn: linear_picture(fn, "column"),
            "row_parallel_linear": lambda fn: linear_picture(fn, "row"),
            "vocab_parallel_cross_entropy": ce_picture, "halo_bytes_per_rank": halo_picture}[exercise]


# ---------------------------------------------------------------------------- section 8: convolutions
CONV_SHAPE = (2, 3, 12, 8)      # B, C, H, W of the image the notebook splits; 3 x 3 kernels, 4 filters


def conv_table(worlds=(2, 3, 4), shape=CONV_SHAPE, c_out: int = 4, kernel: int = 3) -> Table:
    """`conv.spatial_run` on each number of ranks: per rank its rows, the largest difference from the
    unsplit layer (output, input gradient, weight gradient after the all-reduce; float64), and the
    bytes it sent forward and backward next to `conv.halo_bytes`."""
    from labkit.tensor_parallel import conv

    rows = []
    for p in worlds:
        want = conv.halo_bytes(shape[0], shape[1], shape[3], kernel, p, 8)
        for r, res in enumerate(launch(conv.spatial_run, p, shape, c_out, kernel)):
            err = max(res["y_err"], res["dx_err"], res["dw_err"], res["db_err"])
            rows.append([p, r, f"{res['rows'][0]}..{res['rows'][1] - 1}", err, res["sent"]["forward"],
                         res["sent"]["backward"], want[r]])
    B, C, H, W = shape
    return Table(["ranks", "rank", "rows", "max |diff|", "sent fwd", "sent bwd", "halo formula"], rows,
                 {"max |diff|": ".1e"}, f"conv {C}->{c_out}, {kernel}x{kernel}, on {B}x{C}x{H}x{W} float64; "
                                        f"halo = (k//2) rows x B x C x W x 8 B per neighbour")


def conv_channel_table(world: int = 2, shape=CONV_SHAPE, c_mid: int = 8, kernel: int = 3) -> Table:
    """`conv.channel_run`: conv(3->c_mid) ReLU conv(c_mid->3) with the middle channels split; per rank the
    largest differences and every collective it ran (elements, bytes sent in a ring)."""
    from labkit.tensor_parallel import conv

    rows = []
    for r, res in enumerate(launch(conv.channel_run, world, shape, c_mid, kernel)):
        err = max(res["y_err"], res["dx_err"], res["dw1_err"], res["dw2_err"])
        calls = ", ".join(f"{op} {ph} {n} el. ({b} B)" for op, ph, n, b in res["collectives"])
        rows.append([r, err, calls])
    return Table(["rank", "max |diff|", "collectives"], rows, {"max |diff|": ".1e"},
                 f"{world} ranks, {c_mid} middle channels split {c_mid // world} per rank, float64")


def conv_cost_table(batch_size: int = 32, channels: int = 256, size: int = 56, kernel: int = 3,
                    worlds=(2, 4, 8), itemsize: int = 2) -> Table:
    """A ResNet-like layer (C -> C, k x k, size x size maps, 16-bit): per rank and pass, the bytes the
    busiest rank sends (spatial: two halos; channel split: the all-reduce of the C x H x W output in a
    ring, 2(p-1)/p of it) and the weights it holds (spatial: all; channel: 1/p)."""
    from labkit.tensor_parallel import conv

    act = batch_size * channels * size * size * itemsize
    weights = channels * channels * kernel * kernel * itemsize
    rows = []
    for p in worlds:
        halo = max(conv.halo_bytes(batch_size, channels, size, kernel, p, itemsize))
        ring = 2 * (p - 1) / p * act
        rows.append([p, halo / 1e6, ring / 1e6, ring / halo, weights / 1e6, weights / p / 1e6])
    return Table(["ranks", "spatial MB", "channel MB", "ratio", "spatial weights MB", "channel weights MB"],
                 rows, {"spatial MB": ".2f", "channel MB": ".1f", "ratio": ".0f", "spatial weights MB": ".2f",
                        "channel weights MB": ".3f"},
                 f"conv {channels}->{channels} {kernel}x{kernel} on {batch_size}x{channels}x{size}x{size}, "
                 f"{itemsize} B/element: sent per rank per pass, and weights held")


def halo_picture(fn):
    """The learner's `halo_bytes_per_rank` next to the bytes each rank sent in `conv.spatial_run`."""
    from labkit.tensor_parallel import conv

    rows = []
    B, C, H, W = CONV_SHAPE
    for p in (2, 3):
        yours = list(fn(B, C, W, 3, p, 8))
        sent = [res["sent"]["forward"] for res in launch(conv.spatial_run, p)]
        rows.append([p, yours, sent, yours == sent])
    for k, p in ((5, 4), (1, 3)):
        yours, want = list(fn(B, C, W, k, p, 8)), conv.halo_bytes(B, C, W, k, p, 8)
        rows.append([f"{p} (k={k}, formula)", yours, want, yours == want])
    table = Table(["ranks", "yours", "sent (measured) / formula", "equal"], rows)
    print(table)
    return table


def halo_player(H: int = 12, W: int = 6, world: int = 3, kernel: int = 3):
    """Play + slider over `labkit.viz.conv.halo_frames`: the exchange, then the k x k window moving
    down every rank's stripe at once."""
    from labkit.viz.conv import halo_frames, halo_html
    from labkit.viz.player import player

    frames = halo_frames(H, W, world, kernel)
    return player(lambda i: halo_html(frames[i]), len(frames), interval_ms=700)
