"""Lab 14's all-to-all exercise run on real ranks, for both the notebook's "check your work" picture and
the grader's harness (`labkit.grading.harness.lab14_all_to_all` / `lab14_ulysses`).

`all_to_all_rank` calls a module's ``all_to_all_4d`` on this rank's slice for each case and logs the
collectives it calls; `ulysses_rank` runs Ulysses attention with it as both exchanges.
"""
from __future__ import annotations

from labkit.collectives.counting import watch_collectives


def all_to_all_rank(rank, world, module, cases):
    phase = {"now": "forward"}
    log = watch_collectives(phase, module)
    out = []
    for case in cases:
        y = module.all_to_all_4d(case["x"][rank].clone(), case["scatter"], case["gather"])
        out.append({"y": y.detach().clone() if hasattr(y, "detach") else y, "calls": log[:]})
        log.clear()
    return out


def ulysses_rank(rank, world, module, case):
    import torch

    from labkit.context_parallel.attention import attention

    class Exchange(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, scatter, gather):
            ctx.dims = (scatter, gather)
            return module.all_to_all_4d(x, scatter, gather)

        @staticmethod
        def backward(ctx, grad):
            scatter, gather = ctx.dims
            return module.all_to_all_4d(grad.contiguous(), gather, scatter), None, None

    local = [t.chunk(world, dim=2)[rank].clone().requires_grad_() for t in (case["q"], case["k"], case["v"])]
    heads = [Exchange.apply(t, 1, 2) for t in local]                        # (B, H/N, S, D)
    pos = torch.arange(case["q"].shape[2])
    y = Exchange.apply(attention(*heads, pos, pos, case["causal"]), 2, 1)     # (B, H, S/N, D)
    (y * case["up"].chunk(world, dim=2)[rank]).sum().backward()
    return {"y": y.detach(), "grads": [t.grad for t in local]}
