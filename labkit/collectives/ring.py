"""Ring collectives built only from isend/irecv (via `exchange`).

Ranks form a ring: rank r sends to (r + 1) % N and receives from (r - 1) % N.

Schedule (N ranks, chunks numbered 0..N-1, steps s = 0..N-2):
- reduce-scatter: rank r sends chunk (r - s - 1) % N and receives chunk
  (r - s - 2) % N, which it adds to its own copy. After N-1 steps rank r holds
  the full sum of chunk r (the chunk `reduce_scatter_tensor` gives rank r).
- all-gather: rank r sends chunk (r - s) % N and receives chunk (r - s - 1) % N,
  which it stores. After N-1 steps every rank holds every chunk.

Bytes (c_i = bytes of chunk i, S = sum of c_i): in an all-reduce rank r sends
every chunk but r during reduce-scatter and every chunk but r+1 during
all-gather, so bytes_sent(r) = 2S - c_r - c_{(r+1)%N}; summed over ranks that
is exactly 2(N-1)·S. See labkit.collectives.formulas.

Pipelining: a reduce-scatter chunk larger than SEGMENT_BYTES travels as
segments of that size, and each segment is added as soon as it arrives while
the next ones are still on the wire. Bytes and steps are unchanged; each
segment counts as one message.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from labkit.collectives.chunking import chunk_bounds
from labkit.collectives.p2p import check_tensor, exchange, exchange_pipelined, flat_view, group_info
from labkit.collectives.stats import CommStats

# Reduce-scatter chunks larger than this travel in segments, so adding one segment
# overlaps with receiving the next (bytes are unchanged; messages count segments).
SEGMENT_BYTES = 1 << 20


def _check_bounds(buf: torch.Tensor, bounds, world_size: int, where: str) -> list[int]:
    if not isinstance(buf, torch.Tensor) or buf.dim() != 1 or not buf.is_contiguous():
        raise ValueError(f"{where}: buf must be a contiguous 1-D tensor")
    bounds = [int(b) for b in bounds]
    if len(bounds) != world_size + 1 or bounds[0] != 0 or bounds[-1] != buf.numel() \
            or any(b1 < b0 for b0, b1 in zip(bounds, bounds[1:])):
        raise ValueError(f"{where}: bounds must be {world_size + 1} non-decreasing offsets from 0 to "
                         f"buf.numel()={buf.numel()}, got {bounds}")
    return bounds


# BEGIN SOLUTION (production: large chunks travel in segments that are added as they arrive)
def ring_reduce_scatter_chunks(buf: torch.Tensor, bounds) -> CommStats:
    """In-place ring reduce-scatter (sum) of a 1-D contiguous buffer cut at ``bounds``.

    Chunk i is ``buf[bounds[i]:bounds[i+1]]`` (sizes may differ). Afterwards
    chunk r of rank r's ``buf`` holds the sum over ranks of chunk r; rank r's
    other chunks hold partial sums (unspecified). N-1 steps.
    """
    rank, n = group_info("ring_reduce_scatter_chunks")
    check_tensor(buf, "ring_reduce_scatter_chunks", "buf")
    b = _check_bounds(buf, bounds, n, "ring_reduce_scatter_chunks")
    stats = CommStats()
    if n == 1:
        return stats
    right, left = (rank + 1) % n, (rank - 1) % n
    tmp = torch.empty(max(b[i + 1] - b[i] for i in range(n)), dtype=buf.dtype, device=buf.device)
    segment = max(1, SEGMENT_BYTES // buf.element_size())
    for s in range(n - 1):
        c_send, c_recv = (rank - s - 1) % n, (rank - s - 2) % n
        size = b[c_recv + 1] - b[c_recv]
        send, target = buf[b[c_send]:b[c_send + 1]], buf[b[c_recv]:b[c_recv + 1]]
        if max(send.numel(), size) <= segment:
            exchange(stats, send=send, dst=right, recv=tmp[:size], src=left)
            target.add_(tmp[:size])
        else:
            exchange_pipelined(stats, send, right, tmp[:size], left, segment,
                               lambda a, z: target[a:z].add_(tmp[a:z]))
    return stats
# END SOLUTION


def _ring_reduce_scatter_chunks(buf, bounds):
    """Ring reduce-scatter (sum), in place, of a 1-D contiguous tensor cut into uneven chunks.

    buf: 1-D contiguous tensor (float32/float64/bfloat16), same length on all ranks.
    bounds: list of world_size + 1 ints; chunk i is ``buf[bounds[i]:bounds[i+1]]``
    (chunks may have different sizes, some may be empty).
    Schedule: N-1 steps; at step s (0-based) rank r sends chunk (r - s - 1) % N to
    rank (r + 1) % N and receives chunk (r - s - 2) % N from rank (r - 1) % N, adding
    it into its own copy of that chunk.
    After the call: chunk r of rank r's buf equals the sum over all ranks of chunk r;
    other chunks hold partial sums (unspecified).
    Returns CommStats: rank r sends every chunk except chunk r exactly once.
    """
    # BEGIN SOLUTION
    # HINT: N-1 rounds of `exchange` with both ring neighbours at once; receive into a spare buffer
    # HINT: (torch.empty), then add it into your copy of that chunk.
    rank, n = dist.get_rank(), dist.get_world_size()
    stats = CommStats()
    if n == 1:
        return stats
    right, left = (rank + 1) % n, (rank - 1) % n
    biggest = max(bounds[i + 1] - bounds[i] for i in range(n))
    incoming = torch.empty(biggest, dtype=buf.dtype, device=buf.device)
    for s in range(n - 1):
        send_c = (rank - s - 1) % n
        recv_c = (rank - s - 2) % n
        recv_len = bounds[recv_c + 1] - bounds[recv_c]
        exchange(stats, send=buf[bounds[send_c]:bounds[send_c + 1]], dst=right,
                 recv=incoming[:recv_len], src=left)
        buf[bounds[recv_c]:bounds[recv_c + 1]] += incoming[:recv_len]
    return stats
    # END SOLUTION


def ring_all_gather_chunks(buf: torch.Tensor, bounds) -> CommStats:
    """In-place ring all-gather of a 1-D contiguous buffer cut at ``bounds``.

    Before: rank r's chunk r (``buf[bounds[r]:bounds[r+1]]``) is valid. After:
    every chunk i on every rank equals rank i's chunk i. N-1 steps.
    """
    _, n = group_info("ring_all_gather_chunks")
    check_tensor(buf, "ring_all_gather_chunks", "buf")
    return _ring_all_gather_chunks(buf, _check_bounds(buf, bounds, n, "ring_all_gather_chunks"))


def _ring_all_gather_chunks(buf, bounds):
    """Ring all-gather, in place, of a 1-D contiguous tensor cut into uneven chunks.

    buf, bounds: as in ring_reduce_scatter_chunks. Before the call only chunk r of
    rank r's buf is meaningful. Schedule: N-1 steps; at step s rank r sends chunk
    (r - s) % N to rank (r + 1) % N and receives chunk (r - s - 1) % N from rank
    (r - 1) % N, storing it (no addition).
    After the call: chunk i of every rank's buf equals chunk i of rank i's buf.
    Returns CommStats: rank r sends every chunk except chunk (r + 1) % N exactly once.
    """
    # BEGIN SOLUTION
    # HINT: the same ring as reduce-scatter, one chunk later, and `exchange` can receive straight
    # HINT: into the slice of buf where the chunk belongs.
    rank, n = dist.get_rank(), dist.get_world_size()
    stats = CommStats()
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        send_c = (rank - s) % n
        recv_c = (rank - s - 1) % n
        exchange(stats, send=buf[bounds[send_c]:bounds[send_c + 1]], dst=right,
                 recv=buf[bounds[recv_c]:bounds[recv_c + 1]], src=left)
    return stats
    # END SOLUTION


# BEGIN SOLUTION (labkit's checked all-reduce of any tensor, shown in Lab 05 after the exercise)
def ring_all_reduce(tensor: torch.Tensor) -> CommStats:
    """Sum ``tensor`` over all ranks, in place, with a ring (reduce-scatter then all-gather).

    Any shape and length: the flattened tensor of L elements is cut into N
    chunks by `chunk_bounds` (the first L mod N chunks get one extra element)
    and chunks travel unpadded. 2(N-1) steps; bytes per rank in
    `formulas.ring_all_reduce_bytes`.
    """
    _, n = group_info("ring_all_reduce")
    check_tensor(tensor, "ring_all_reduce")
    with flat_view(tensor) as flat:
        bounds = chunk_bounds(flat.numel(), n)
        stats = ring_reduce_scatter_chunks(flat, bounds)
        stats = stats + ring_all_gather_chunks(flat, bounds)
    return stats
# END SOLUTION


def _ring_all_reduce(tensor):
    """Sum ``tensor`` over all ranks, in place: ring reduce-scatter, then ring all-gather.

    tensor: any shape, any number of elements L (need not divide by world_size),
    float32/float64/bfloat16.
    Cut the flattened tensor with ``labkit.collectives.chunk_bounds(L, world_size)``
    (the first L mod N chunks get one extra element), then call your
    ring_reduce_scatter_chunks and ring_all_gather_chunks. Chunks travel unpadded.
    Returns the two CommStats added together: 2(N-1) steps, and rank r sends
    2S - c_r - c_{(r+1)%N} bytes (c_i = bytes of chunk i, S = tensor bytes).
    """
    # BEGIN SOLUTION
    # HINT: a flat view of the tensor (a contiguous copy if need be, copied back at the end), cut
    # HINT: with chunk_bounds; your two ring functions; CommStats objects add with +.
    n = dist.get_world_size()
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1).clone()
    bounds = chunk_bounds(flat.numel(), n)
    stats = ring_reduce_scatter_chunks(flat, bounds) + ring_all_gather_chunks(flat, bounds)
    if not tensor.is_contiguous():
        tensor.copy_(flat.view(tensor.shape))
    return stats
    # END SOLUTION


def _check_whole_and_part(op: str, n: int, whole, part) -> int:
    """Check a (name, tensor) pair where ``whole`` must hold n times ``part``'s elements; return part's numel."""
    (wname, w), (pname, q) = whole, part
    check_tensor(w, op, wname)
    check_tensor(q, op, pname)
    if w.dtype != q.dtype:
        raise TypeError(f"{op}: {wname} dtype {w.dtype} != {pname} dtype {q.dtype}")
    m = q.numel()
    if w.numel() != n * m:
        raise ValueError(f"{op}: {wname} must have world_size * {pname}.numel() = {n}*{m} = {n * m} "
                         f"elements, got {w.numel()}")
    return m


# BEGIN SOLUTION (the reduce-scatter schedule again, with torch's equal chunks)
def ring_reduce_scatter(output: torch.Tensor, input: torch.Tensor) -> CommStats:
    """Ring reduce-scatter (sum) with `dist.reduce_scatter_tensor`'s shapes.

    input: N * output.numel() elements (any shape); chunk r is elements
    ``[r*m, (r+1)*m)`` of the flattened input, m = output.numel(). Rank r's
    ``output`` receives the sum over ranks of chunk r; ``input`` is not
    modified. Equal chunks only (that is torch's rule); for uneven chunks use
    `ring_reduce_scatter_chunks`.
    """
    rank, n = group_info("ring_reduce_scatter")
    m = _check_whole_and_part("ring_reduce_scatter", n, whole=("input", input), part=("output", output))
    src = input.reshape(-1) if input.is_contiguous() else input.reshape(-1).clone()
    stats = CommStats()
    with flat_view(output) as out:
        if n == 1:
            out.copy_(src)
            return stats
        right, left = (rank + 1) % n, (rank - 1) % n
        acc, tmp = torch.empty_like(out), torch.empty_like(out)
        for s in range(n - 1):
            c_send, c_recv = (rank - s - 1) % n, (rank - s - 2) % n
            send = src[c_send * m:(c_send + 1) * m] if s == 0 else acc
            exchange(stats, send=send, dst=right, recv=tmp, src=left)
            torch.add(tmp, src[c_recv * m:(c_recv + 1) * m], out=acc)
        out.copy_(acc)
    return stats
# END SOLUTION


def ring_all_gather(output: torch.Tensor, input: torch.Tensor) -> CommStats:
    """Ring all-gather with `dist.all_gather_into_tensor`'s shapes.

    output: N * input.numel() elements (any shape); afterwards elements
    ``[r*m, (r+1)*m)`` of the flattened output hold rank r's input, m =
    input.numel(). Equal sizes only (torch's rule); for uneven chunks use
    `ring_all_gather_chunks`.
    """
    rank, n = group_info("ring_all_gather")
    m = _check_whole_and_part("ring_all_gather", n, whole=("output", output), part=("input", input))
    with flat_view(output) as out:
        out[rank * m:(rank + 1) * m].copy_(input.reshape(-1))
        stats = ring_all_gather_chunks(out, [i * m for i in range(n + 1)])
    return stats
