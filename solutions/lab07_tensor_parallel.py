"""Lab 07 exercises: tensor parallelism.

Reference answers, written by ``make exercises`` from labkit: edit labkit, not this file.

Every function runs on every rank of an initialised process group (e.g. under
``labkit.dist.launch``); use ``dist.all_reduce`` for communication (sum unless stated), and make
the backward pass right as well as the forward: the grader checks gradients.

- ``copy_to_tp`` / ``reduce_from_tp``: Megatron's conjugate operators f and g;
- ``column_parallel_linear`` / ``row_parallel_linear``: a linear layer split by output / input
  features;
- ``vocab_parallel_cross_entropy``: the loss over logits split by vocabulary, never gathered;
- ``halo_bytes_per_rank`` (section 8, a plain function): what a row-split convolution's halo
  exchange sends.
"""
import torch
import torch.distributed as dist


class _PlainCopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class _PlainReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def copy_to_tp(x):
    """Megatron's f: return x unchanged in forward; in backward, all-reduce (sum) the gradient.

    x: a tensor, the same on every rank (a replicated activation entering a split region).
    Write it as a torch.autograd.Function (forward / backward static methods) and return
    ``YourFunction.apply(x)``.
    """
    return _PlainCopyToTP.apply(x)


def reduce_from_tp(x):
    """Megatron's g: in forward, return the sum of x over all ranks; in backward, pass the
    gradient through unchanged.

    x: a tensor of the same shape on every rank (each rank's partial result). Do not modify x
    in place (clone before dist.all_reduce). Write it as a torch.autograd.Function.
    """
    return _PlainReduceFromTP.apply(x)


def column_parallel_linear(x, weight, bias):
    """This rank's output features of y = x·Wᵀ + b.

    x: (..., in), the same on every rank; weight: (out/t, in), this rank's rows of W; bias:
    (out/t,), this rank's part of b (the grader always passes one; torch.nn.functional.linear
    would take None as well). Returns (..., out/t). The gradient reaching x must be the full one
    (every rank's part added up): pass x through your copy_to_tp first. The grader runs this with
    its own copy_to_tp in place of yours, so only this function is graded here.
    """
    return torch.nn.functional.linear(copy_to_tp(x), weight, bias)


def row_parallel_linear(x, weight, bias):
    """The whole y = x·Wᵀ + b from input features split over ranks.

    x: (..., in/t), this rank's input features; weight: (out, in/t), this rank's columns of W;
    bias: (out,), the whole bias (the same on every rank; the grader always passes one, so
    bias=None need not be handled). Returns (..., out), the same on every rank: the ranks'
    partial products summed with your reduce_from_tp, the bias added once. The grader runs this
    with its own reduce_from_tp in place of yours, so only this function is graded here.
    """
    return reduce_from_tp(torch.nn.functional.linear(x, weight)) + bias


class _PlainVocabCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, start):
        rows = logits.shape[1]
        zmax = logits.max(dim=1).values.clone()
        dist.all_reduce(zmax, op=dist.ReduceOp.MAX)
        shifted = logits - zmax[:, None]
        exp = shifted.exp()
        sum_exp = exp.sum(dim=1)
        dist.all_reduce(sum_exp)
        mine = (targets >= start) & (targets < start + rows)
        local = (targets - start).clamp(0, rows - 1)
        target_z = shifted.gather(1, local[:, None]).squeeze(1) * mine
        dist.all_reduce(target_z)
        ctx.save_for_backward(exp / sum_exp[:, None], local, mine)
        return (sum_exp.log() - target_z).mean()

    @staticmethod
    def backward(ctx, grad):
        softmax, local, mine = ctx.saved_tensors
        g = softmax.clone()
        idx = torch.arange(g.shape[0], device=g.device)
        g[idx[mine], local[mine]] -= 1.0
        return g * (grad / g.shape[0]), None, None


def vocab_parallel_cross_entropy(logits, targets, start):
    """Mean cross-entropy over N rows whose logits are split by vocabulary over the ranks.

    logits: (N, V/t) float, this rank's columns, vocabulary ids start .. start + V/t - 1;
    targets: (N,) int64 ids in 0 .. V-1 (each lives on exactly one rank); start: int.
    Returns the scalar mean over rows of log(sum_v exp(z_v)) - z_target, the same on every rank,
    and its gradient with respect to ``logits`` in backward. Never gather the logits: use three
    all-reduces of N numbers (the row max with op=dist.ReduceOp.MAX, the sum of exps, the target
    logit). Backward needs no communication: d loss / d z_v = (softmax_v - [v == target]) / N.
    """
    return _PlainVocabCE.apply(logits, targets, start)


def halo_bytes_per_rank(batch, channels, width, kernel, world, itemsize):
    """Bytes each rank sends in one halo exchange of a row-split convolution (a list, by rank).

    An image (batch, channels, H, width) is split into ``world`` stripes of rows, rank r holding the
    r-th; a kernel x kernel convolution (odd kernel, stride 1, 'same' padding) needs kernel // 2 rows
    beyond each side of a stripe. Before the convolution every rank sends its top kernel // 2 rows to
    rank r - 1 and its bottom kernel // 2 rows to rank r + 1, when that rank exists (the image's own
    edges are padded with zeros, nothing is sent there). A row is batch * channels * width elements
    of itemsize bytes. Not a collective: this runs on no rank; just return the list.
    """
    row = batch * channels * width * itemsize
    return [((r > 0) + (r < world - 1)) * (kernel // 2) * row for r in range(world)]
