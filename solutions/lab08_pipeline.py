"""Lab 08 exercises: pipeline parallelism.

Reference answers, written by ``make exercises`` from labkit: edit labkit, not this file.

Four pieces of the lab, each graded on its own:
- `schedule_1f1b`: the 1F1B schedule generator;
- `bubble_fraction`: the pipeline bubble under uniform stage times;
- `stage_backward`: a stage's backward with its real receive and send (runs on gloo ranks);
- `optimal_slicing` (section 8.3): TeraPipe's choice of token slices for one long sequence.
"""
from __future__ import annotations

from fractions import Fraction

import torch
import torch.distributed as dist

from labkit.pipeline.schedules import Action


def _one_f_one_b(r: int, p: int, m: int) -> list[Action]:
    """1F1B on rank r: min(m, p - r) warm-up forwards, then alternate B (oldest) and F (next)
    until the forwards run out, then the remaining Bs."""
    warmup = min(m, p - r)
    ops = [Action(r, "F", i) for i in range(warmup)]
    f = warmup
    for b in range(m):
        ops.append(Action(r, "B", b))
        if f < m:
            ops.append(Action(r, "F", f))
            f += 1
    return ops


def schedule_1f1b(num_ranks: int, num_microbatches: int) -> dict[int, list[Action]]:
    """The 1F1B (one-forward-one-backward) schedule, one stage per rank (stage r on rank r).

    Returns {rank: [Action(stage, kind, microbatch), ...]} with kind "F" or "B",
    in the order PyTorch's Schedule1F1B runs them. Rank r:
      1. warm-up: forwards of microbatches 0, 1, ... - as many as min(m, p - r);
      2. steady state: repeat "backward of the oldest microbatch not yet
         backwarded, then forward of the next microbatch" until every
         forward has run;
      3. cool-down: the remaining backwards, oldest first.
    Example p=3, m=4, rank 0: F0 F1 F2 B0 F3 B1 B2 B3; rank 2: F0 B0 F1 B1 F2 B2 F3 B3.
    Raise ValueError if num_microbatches < num_ranks (PyTorch refuses that too)
    or either argument is < 1.
    """
    p, m = num_ranks, num_microbatches
    if p < 1 or m < 1:
        raise ValueError(f"need num_ranks >= 1 and num_microbatches >= 1, got {p}, {m}")
    if m < p:
        raise ValueError(f"1F1B needs num_microbatches >= num_ranks, got m={m}, p={p}")
    return {r: _one_f_one_b(r, p, m) for r in range(p)}


def bubble_fraction(num_ranks: int, num_microbatches: int, virtual_stages: int = 1) -> Fraction:
    """Idle share of the total time of a synchronous pipeline step, as an exact Fraction.

    p = num_ranks, m = num_microbatches, v = virtual_stages (stages per rank; each
    stage costs 1/v of a rank's share of the model). Every stage takes the same
    time. Convention: idle time / (p x step time) - the share of all ranks' time
    that is bubble (not idle / ideal compute). Valid for GPipe and 1F1B (v = 1)
    and for interleaved 1F1B with m >= p. Raise ValueError for arguments < 1.
    """
    p, m, v = num_ranks, num_microbatches, virtual_stages
    if min(p, m, v) < 1:
        raise ValueError(f"need positive arguments, got p={p}, m={m}, v={v}")
    return Fraction(p - 1, v * m + p - 1)


def stage_backward(stage_input: torch.Tensor, stage_output: torch.Tensor, loss: torch.Tensor | None,
                   recv_from: int | None, send_to: int | None, recv_tag: int, send_tag: int):
    """Backward of one stage for one microbatch, with its real receive and send.

    Last stage (``loss`` given, ``recv_from`` None): ``loss.backward()``.
    Otherwise: receive d(loss)/d(stage_output) - a tensor shaped and typed like
    ``stage_output`` - from rank ``recv_from`` with tag ``recv_tag``, then
    backpropagate it through the stage. Parameter .grad accumulate.
    Then, unless this is the first stage (``send_to`` None), send
    ``stage_input.grad`` to rank ``send_to`` with tag ``send_tag`` using
    ``dist.isend`` and return its Work (the caller waits on it); else return None.
    """
    if loss is not None:
        loss.backward()
    else:
        grad_out = torch.empty_like(stage_output)
        dist.recv(grad_out, src=recv_from, tag=recv_tag)
        torch.autograd.backward(stage_output, grad_out)
    if send_to is None:
        return None
    return dist.isend(stage_input.grad.contiguous(), dst=send_to, tag=send_tag)


def optimal_slicing(seq_len, num_stages, cost):
    """TeraPipe's slicing of one sequence: (least latency, slice lengths).

    seq_len: L tokens (or blocks of tokens), an int >= 1; num_stages: K equal pipeline stages.
    cost(length, context): the time, on one stage, of a slice of ``length`` tokens that follows
    ``context`` tokens of prefix (exact numbers: ints or Fractions); it grows with both.
    A slicing is a list of positive ints summing to L; slice j follows the tokens of slices
    0..j-1, and its time is t_j = cost(l_j, l_0 + ... + l_{j-1}). Its latency on K stages is
    Σ_j t_j + (K − 1)·max_j t_j. Return the least latency over all slicings and one slicing
    that has it, in order: ``(latency, [l_0, l_1, ...])``. L up to about 32 must take well under a
    second; trying all 2^(L−1) slicings does not.
    """
    L, K = seq_len, num_stages
    times = {(k, c): cost(k, c) for c in range(L) for k in range(1, L - c + 1)}
    best = None
    for t_max in sorted(set(times.values())):
        if best is not None and (K - 1) * t_max >= best[0]:
            break                                   # every larger bound costs at least this much
        # S[i]: least Σ t over slicings of the first i tokens; last[i]: the length of its last slice
        S, last = [0] + [None] * L, [0] * (L + 1)
        for i in range(1, L + 1):
            for k in range(1, i + 1):
                tk = times[(k, i - k)]
                if tk <= t_max and S[i - k] is not None and (S[i] is None or S[i - k] + tk < S[i]):
                    S[i], last[i] = S[i - k] + tk, k
        if S[L] is None:
            continue
        total = S[L] + (K - 1) * t_max
        if best is None or total < best[0]:
            slices, i = [], L
            while i:
                slices.append(last[i])
                i -= last[i]
            best = (total, slices[::-1])
    return best
