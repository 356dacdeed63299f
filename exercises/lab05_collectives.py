"""Lab 05 exercises: collectives from point-to-point messages.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

Rules for every function here:
- it runs on every rank of an initialised process group (e.g. under
  ``labkit.dist.launch``); get ``rank``/``world_size`` from torch.distributed;
- move data only with ``labkit.collectives.exchange`` (isend/irecv underneath)
  or ``dist.isend``/``dist.irecv`` — never ``dist.all_reduce``, ``dist.broadcast``
  or any other built-in collective (the grader disables them);
- the reduction is a sum, done in place in the tensor you are given;
- return a ``CommStats`` for the calling rank (``exchange`` fills it in for you:
  bytes_sent, bytes_received, messages, steps).
"""
import torch  # noqa: F401
import torch.distributed as dist  # noqa: F401

from labkit.collectives import CommStats, chunk_bounds, exchange  # noqa: F401


def ring_reduce_scatter_chunks(buf, bounds):
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
    raise NotImplementedError("hint: N-1 rounds of `exchange` with both ring neighbours at once; receive into a spare buffer (torch.empty), then add it into your copy of that chunk.")


def ring_all_gather_chunks(buf, bounds):
    """Ring all-gather, in place, of a 1-D contiguous tensor cut into uneven chunks.

    buf, bounds: as in ring_reduce_scatter_chunks. Before the call only chunk r of
    rank r's buf is meaningful. Schedule: N-1 steps; at step s rank r sends chunk
    (r - s) % N to rank (r + 1) % N and receives chunk (r - s - 1) % N from rank
    (r - 1) % N, storing it (no addition).
    After the call: chunk i of every rank's buf equals chunk i of rank i's buf.
    Returns CommStats: rank r sends every chunk except chunk (r + 1) % N exactly once.
    """
    raise NotImplementedError("hint: the same ring as reduce-scatter, one chunk later, and `exchange` can receive straight into the slice of buf where the chunk belongs.")


def ring_all_reduce(tensor):
    """Sum ``tensor`` over all ranks, in place: ring reduce-scatter, then ring all-gather.

    tensor: any shape, any number of elements L (need not divide by world_size),
    float32/float64/bfloat16.
    Cut the flattened tensor with ``labkit.collectives.chunk_bounds(L, world_size)``
    (the first L mod N chunks get one extra element), then call your
    ring_reduce_scatter_chunks and ring_all_gather_chunks. Chunks travel unpadded.
    Returns the two CommStats added together: 2(N-1) steps, and rank r sends
    2S - c_r - c_{(r+1)%N} bytes (c_i = bytes of chunk i, S = tensor bytes).
    """
    raise NotImplementedError("hint: a flat view of the tensor (a contiguous copy if need be, copied back at the end), cut with chunk_bounds; your two ring functions; CommStats objects add with +.")


def tree_broadcast(tensor, src):
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every rank, in place, with a binomial tree.

    With relative rank v = (rank - src) % N and rounds k = 0, 1, ..., ceil(log2 N) - 1:
    in round k every v < 2^k with v + 2^k < N sends the whole tensor to relative rank
    v + 2^k (real rank (v + 2^k + src) % N), which receives it.
    tensor: contiguous, any shape. Returns CommStats: every rank except src receives
    S bytes once; src sends ceil(log2 N) messages.
    """
    raise NotImplementedError("hint: a binomial tree: relabel ranks so the root is 0; the number of ranks holding the data doubles every round (`exchange`).")


def recursive_doubling_all_reduce(tensor):
    """Sum ``tensor`` over all ranks, in place, by recursive doubling; any world size.

    Let P be the largest power of two <= N. (1) Fold: rank P+i (i < N-P) sends its
    tensor to rank i, which adds it. (2) For mask = 1, 2, 4, ... < P, each rank r < P
    swaps its whole tensor with rank r XOR mask and adds what it received.
    (3) Unfold: rank i sends the result back to rank P+i.
    tensor: contiguous, any shape. Returns CommStats: a rank r < P sends log2(P)
    whole tensors, plus one more if it has a fold partner; ranks >= P send one.
    """
    raise NotImplementedError("hint: recursive doubling works on a power of two ranks: deal with the extra ranks before and after; in each round every rank swaps with a partner found from its rank's bits (`exchange`).")
