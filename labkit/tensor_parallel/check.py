"""Lab 07's exercises run on real ranks, for both the notebook's "check your work" pictures and the
grader's harness (`labkit.grading.harness.lab07_tp`), so the two see the same thing.

`exercise_rank` runs one exercise (conjugate f/g, column- or row-parallel linear, vocab-parallel
cross-entropy) from a module for each case on this rank, and logs every collective it calls.
"""
from __future__ import annotations


def watch_tp_collectives(module=None):
    """Wrap dist.all_reduce / all_gather / gather to log (name, numel, in_backward) of every call,
    also where the submission ``module`` imported them by name."""
    import torch.distributed as dist

    log, phase = [], {"backward": False}
    for name in ("all_reduce", "all_gather", "all_gather_into_tensor", "gather", "broadcast"):
        original = getattr(dist, name)

        def watched(tensor, *args, _name=name, _original=original, **kwargs):
            t = tensor[0] if isinstance(tensor, list) else tensor
            log.append((_name, int(t.numel()), phase["backward"]))
            return _original(tensor, *args, **kwargs)

        setattr(dist, name, watched)
        for attr, value in list(vars(module).items()) if module is not None else ():
            if value is original:
                setattr(module, attr, watched)
    return log, phase


def _backward(phase, loss):
    phase["backward"] = True
    loss.backward()
    phase["backward"] = False


def _judge_operators():
    """The grader's own f and g, put in place of the submission's while its split layers are
    graded, so that a stub f or g costs only its own points."""
    import torch
    import torch.distributed as dist

    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            grad = grad.clone()
            dist.all_reduce(grad)
            return grad

    class G(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x = x.clone()
            dist.all_reduce(x)
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad

    return F.apply, G.apply


def exercise_rank(rank, world, module, exercise, cases):
    """Run ``exercise`` ("copy", "reduce", "column", "row" or "ce") of ``module`` on this rank for
    every case. "column" and "row" run with the grader's f and g, not the module's."""
    log, phase = watch_tp_collectives(module)
    if exercise in ("column", "row"):
        module.copy_to_tp, module.reduce_from_tp = _judge_operators()
    results = []
    for case in cases:
        results.append(_exercise_case(rank, world, module, exercise, case, phase))
        results[-1]["calls"] = log[:]
        log.clear()
    return results


def _exercise_case(rank, world, module, exercise, case, phase):
    import torch

    out = {}
    if exercise == "copy":
        x = case["x"].clone().requires_grad_()
        y = module.copy_to_tp(x)
        _backward(phase, (y * case["w"][rank]).sum())
        out["f_out"], out["f_grad"] = y.detach(), x.grad
    elif exercise == "reduce":
        xr = case["parts"][rank].clone().requires_grad_()
        y = module.reduce_from_tp(xr)
        _backward(phase, (y * case["x"]).sum())
        out["g_out"], out["g_grad"], out["g_input_after"] = y.detach(), xr.grad, xr.detach()
    elif exercise == "column":
        x = case["x"].clone().requires_grad_()
        w = case["weight"].chunk(world, 0)[rank].clone().requires_grad_()
        b = case["bias"].chunk(world)[rank].clone().requires_grad_()
        y = module.column_parallel_linear(x, w, b)
        _backward(phase, (y * case["upstream"].chunk(world, -1)[rank]).sum())
        out.update(y=y.detach(), x_grad=x.grad, w_grad=w.grad, b_grad=b.grad)
    elif exercise == "row":
        x = case["x"].chunk(world, -1)[rank].clone().requires_grad_()
        w = case["weight"].chunk(world, 1)[rank].clone().requires_grad_()
        b = case["bias"].clone().requires_grad_()
        y = module.row_parallel_linear(x, w, b)
        _backward(phase, (y * case["upstream"]).sum())
        out.update(y=y.detach(), x_grad=x.grad, w_grad=w.grad, b_grad=b.grad)
    else:
        rows = case["logits"].shape[1] // world
        z = case["logits"][:, rank * rows:(rank + 1) * rows].clone().requires_grad_()
        loss = module.vocab_parallel_cross_entropy(z, case["targets"], rank * rows)
        _backward(phase, loss * case["scale"])
        out.update(loss=torch.as_tensor(loss).detach().reshape(()), z_grad=z.grad)
    return out
