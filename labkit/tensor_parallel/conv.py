"""A convolution split across ranks: spatially, with a halo exchange, or by channels, like tensor parallelism.

**Spatial split (halo exchange).** Rank r of p holds rows r·H/p … (r+1)·H/p − 1 of an (B, C, H, W)
image. A k × k convolution with 'same' padding needs, for its first and last output rows, the
h = k // 2 rows beyond the stripe, which live on the neighbouring ranks. So before the convolution
each rank sends its top h rows to rank r − 1 and its bottom h rows to rank r + 1 (`halo_exchange`),
and pads the image's true edges with zeros. Every rank then computes exactly its stripe of the
unsplit layer's output. In backward the gradients of the received halo rows go back to their
owners and are added to their border rows; the weight gradient is each rank's partial sum, added
up with one all-reduce (as in data parallelism: every rank holds the whole filter).

    bytes a rank sends per pass = (number of neighbours: 1 at the ends, 2 inside) · h·B·C·W·e

— independent of H: the halo is a surface, the stripe a volume (`halo_bytes`).

**Channel split.** Splitting the *output* channels gives each rank whole filters over the whole
input: Megatron's column-parallel Linear, with the input replicated (f: all-reduce of its gradient
in backward). Splitting the *input* channels makes each rank's output a partial sum: row-parallel,
an all-reduce in forward (g). A column-split convolution followed by a row-split one needs nothing in
between — the Megatron MLP with convolutions (`channel_split_pair`), one all-reduce of the full
activation, 2(p − 1)/p · B·C·H·W·e bytes sent per rank in a ring, each way.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn import functional as F

from labkit.checks import check_int
from labkit.collectives.counting import record_send
from labkit.tensor_parallel.comm import copy_to_tp, reduce_from_tp

__all__ = ["halo_exchange", "spatial_conv2d", "halo_bytes", "stripe", "channel_split_pair", "spatial_run",
           "channel_run"]


def stripe(H: int, world: int, rank: int) -> slice:
    """Rows of an H-row image that ``rank`` of ``world`` holds (equal stripes; world must divide H)."""
    if H % world:
        raise ValueError(f"stripe: {world} ranks must divide the image's {H} rows")
    n = H // world
    return slice(rank * n, (rank + 1) * n)


def halo_bytes_per_rank(batch, channels, width, kernel, world, itemsize):
    """Bytes each rank sends in one halo exchange of a row-split convolution (a list, by rank).

    An image (batch, channels, H, width) is split into ``world`` stripes of rows, rank r holding the
    r-th; a kernel x kernel convolution (odd kernel, stride 1, 'same' padding) needs kernel // 2 rows
    beyond each side of a stripe. Before the convolution every rank sends its top kernel // 2 rows to
    rank r - 1 and its bottom kernel // 2 rows to rank r + 1, when that rank exists (the image's own
    edges are padded with zeros, nothing is sent there). A row is batch * channels * width elements
    of itemsize bytes. Not a collective: this runs on no rank; just return the list.
    """
    # BEGIN SOLUTION
    # HINT: count each rank's neighbours (the first and the last stripe have one, the others two) and
    # HINT: the rows each neighbour needs; a row of the stripe is one row of every image and channel.
    row = batch * channels * width * itemsize
    return [((r > 0) + (r < world - 1)) * (kernel // 2) * row for r in range(world)]
    # END SOLUTION


def halo_bytes(batch: int, channels: int, width: int, kernel: int, world: int, itemsize: int = 4) -> list[int]:
    """Bytes each rank sends in one halo exchange (one pass), by rank: (neighbours) · (k // 2)·B·C·W·e."""
    fn = "halo_bytes"
    k = check_int(fn, "kernel", kernel, minimum=1)
    p = check_int(fn, "world", world, minimum=1)
    sizes = [check_int(fn, name, v, minimum=1) for name, v in
             (("batch", batch), ("channels", channels), ("width", width), ("itemsize", itemsize))]
    return halo_bytes_per_rank(sizes[0], sizes[1], sizes[2], k, p, sizes[3])


def _exchange(top: torch.Tensor, bottom: torch.Tensor, phase: str):
    """Send ``top`` to rank − 1 and ``bottom`` to rank + 1; return (rows from rank − 1, rows from
    rank + 1), zeros where there is no neighbour. Sends are recorded (`record_send`)."""
    r, p = dist.get_rank(), dist.get_world_size()
    from_above, from_below = torch.zeros_like(bottom), torch.zeros_like(top)
    reqs = []
    if r > 0:
        record_send(phase, top, r - 1)
        reqs += [dist.isend(top.contiguous(), r - 1), dist.irecv(from_above, r - 1)]
    if r < p - 1:
        record_send(phase, bottom, r + 1)
        reqs += [dist.isend(bottom.contiguous(), r + 1), dist.irecv(from_below, r + 1)]
    for q in reqs:
        q.wait()
    return from_above, from_below


class _HaloExchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, h):
        ctx.h = h
        if h == 0:
            return x.clone()
        above, below = _exchange(x[:, :, :h], x[:, :, -h:], "forward")
        return torch.cat([above, x, below], dim=2)

    @staticmethod
    def backward(ctx, grad):
        h = ctx.h
        if h == 0:
            return grad, None
        g = grad[:, :, h:-h].clone()
        # the gradient of the rows we received belongs to their owners: send it back, add what comes
        to_above, to_below = grad[:, :, :h].contiguous(), grad[:, :, -h:].contiguous()
        from_above, from_below = _exchange(to_above, to_below, "backward")
        g[:, :, :h] += from_above
        g[:, :, -h:] += from_below
        return g, None


def halo_exchange(x: torch.Tensor, halo: int) -> torch.Tensor:
    """x: this rank's stripe (B, C, H/p, W) -> (B, C, H/p + 2·halo, W) with the neighbours' border rows
    (zeros at the image's edges); its backward returns the halo rows' gradients to their owners."""
    halo = check_int("halo_exchange", "halo", halo, minimum=0)
    if x.dim() != 4 or x.shape[2] < halo:
        raise ValueError(f"halo_exchange: x must be (B, C, rows, W) with at least {halo} rows, got {tuple(x.shape)}")
    return _HaloExchange.apply(x, halo)


def spatial_conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """This rank's stripe of conv2d(x_full, weight, bias, padding=k // 2) (odd k, stride 1)."""
    k = weight.shape[-1]
    if weight.shape[-2] != k or k % 2 == 0:
        raise ValueError(f"spatial_conv2d: the kernel must be square and odd, got {tuple(weight.shape[-2:])}")
    return F.conv2d(halo_exchange(x, k // 2), weight, bias, padding=(0, k // 2))


def channel_split_pair(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                       b2: torch.Tensor) -> torch.Tensor:
    """conv(w2) ∘ ReLU ∘ conv(w1) with w1's output channels and w2's input channels split over
    the ranks (this rank gets its p-th of each): f, column-split conv, ReLU, row-split conv, g."""
    p, r = dist.get_world_size(), dist.get_rank()
    c_mid = w1.shape[0]
    if c_mid % p:
        raise ValueError(f"channel_split_pair: {p} ranks must divide the {c_mid} middle channels")
    part = slice(r * c_mid // p, (r + 1) * c_mid // p)
    k1, k2 = w1.shape[-1] // 2, w2.shape[-1] // 2
    hidden = F.relu(F.conv2d(copy_to_tp(x), w1[part], b1[part], padding=k1))  # (B, C_mid/p, H, W)
    partial = F.conv2d(hidden, w2[:, part], None, padding=k2)                # this rank's share
    return reduce_from_tp(partial) + b2.view(1, -1, 1, 1)


# ---------------------------------------------------------------------------- runs on ranks
def _layer(shape, c_out: int, kernel: int, seed: int, device):
    g = torch.Generator().manual_seed(seed)
    B, C, H, W = shape
    x = torch.randn(B, C, H, W, generator=g, dtype=torch.float64)
    w = torch.randn(c_out, C, kernel, kernel, generator=g, dtype=torch.float64) / (C * kernel * kernel) ** 0.5
    b = torch.randn(c_out, generator=g, dtype=torch.float64)
    return x.to(device), w.to(device), b.to(device)


def spatial_run(rank: int, world: int, shape=(2, 3, 12, 8), c_out: int = 4, kernel: int = 3, seed: int = 0):
    """On each rank: the split layer's forward and backward (loss = Σ y²/2 over the whole image) against
    the unsplit layer's. Returns {"y_err", "dx_err", "dw_err", "db_err": max |difference| on this rank's
    part (float64), "sent": {phase: bytes this rank sent}}."""
    from labkit.collectives.counting import count_collectives
    from labkit.dist import device

    dev = device()
    x, w, b = _layer(shape, c_out, kernel, seed, dev)
    rows = stripe(shape[2], world, rank)
    xl = x[:, :, rows].clone().requires_grad_()
    wl, bl = w.clone().requires_grad_(), b.clone().requires_grad_()
    with count_collectives() as sends:
        yl = spatial_conv2d(xl, wl, bl)
        (yl.pow(2).sum() / 2).backward()
    for grad in (wl.grad, bl.grad):                      # each rank's partial sums over its rows
        dist.all_reduce(grad)
    xf, wf, bf = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()
    y = F.conv2d(xf, wf, bf, padding=kernel // 2)
    (y.pow(2).sum() / 2).backward()
    err = lambda a, c: float((a.detach() - c.detach()).abs().max())        # noqa: E731
    sent = {"forward": 0, "backward": 0}
    for s in sends:
        sent[s.phase] += int(s.bytes_sent)
    return {"y_err": err(yl, y[:, :, rows]), "dx_err": err(xl.grad, xf.grad[:, :, rows]),
            "dw_err": err(wl.grad, wf.grad), "db_err": err(bl.grad, bf.grad), "sent": sent,
            "rows": (rows.start, rows.stop)}


def channel_run(rank: int, world: int, shape=(2, 3, 12, 8), c_mid: int = 8, kernel: int = 3, seed: int = 0):
    """On each rank: `channel_split_pair` (forward and backward) against the unsplit pair. Returns
    {"y_err", "dx_err", "dw1_err" (this rank's output channels of w1), "dw2_err" (its input channels
    of w2), "collectives": [(name, phase, elements, bytes sent)]}."""
    from labkit.collectives.counting import count_collectives
    from labkit.dist import device

    dev = device()
    x, w1, b1 = _layer(shape, c_mid, kernel, seed, dev)
    _, w2, b2 = _layer((shape[0], c_mid, shape[2], shape[3]), shape[1], kernel, seed + 1, dev)
    params = [t.clone().requires_grad_() for t in (x, w1, b1, w2, b2)]
    with count_collectives() as calls:
        y = channel_split_pair(*params)
        (y.pow(2).sum() / 2).backward()
    ref = [t.clone().requires_grad_() for t in (x, w1, b1, w2, b2)]
    yr = F.conv2d(F.relu(F.conv2d(ref[0], ref[1], ref[2], padding=kernel // 2)), ref[3], ref[4],
                  padding=kernel // 2)
    (yr.pow(2).sum() / 2).backward()
    part = slice(rank * c_mid // world, (rank + 1) * c_mid // world)
    err = lambda a, c: float((a.detach() - c.detach()).abs().max())        # noqa: E731
    return {"y_err": err(y, yr), "dx_err": err(params[0].grad, ref[0].grad),
            "dw1_err": err(params[1].grad[part], ref[1].grad[part]),
            "dw2_err": err(params[3].grad[:, part], ref[3].grad[:, part]),
            "collectives": [(c.op, c.phase, c.numel, int(c.bytes_sent)) for c in calls]}
