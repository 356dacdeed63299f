"""Lab 08 exercises: pipeline parallelism.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

Four pieces of the lab, each graded on its own:
- `schedule_1f1b`: the 1F1B schedule generator;
- `bubble_fraction`: the pipeline bubble under uniform stage times;
- `stage_backward`: a stage's backward with its real receive and send (runs on gloo ranks);
- `optimal_slicing` (section 8.3): TeraPipe's choice of token slices for one long sequence.
"""
from __future__ import annotations

from fractions import Fraction  # noqa: F401

import torch  # noqa: F401
import torch.distributed as dist  # noqa: F401

from labkit.pipeline.schedules import Action  # noqa: F401


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
    raise NotImplementedError("hint: check the arguments first; then each rank runs min(m, p - r) forwards, then alternates the backward of its oldest microbatch with the next forward; build Action(stage, kind, microbatch) tuples.")


def bubble_fraction(num_ranks: int, num_microbatches: int, virtual_stages: int = 1) -> Fraction:
    """Idle share of the total time of a synchronous pipeline step, as an exact Fraction.

    p = num_ranks, m = num_microbatches, v = virtual_stages (stages per rank; each
    stage costs 1/v of a rank's share of the model). Every stage takes the same
    time. Convention: idle time / (p x step time) - the share of all ranks' time
    that is bubble (not idle / ideal compute). Valid for GPipe and 1F1B (v = 1)
    and for interleaved 1F1B with m >= p. Raise ValueError for arguments < 1.
    """
    raise NotImplementedError("hint: each rank idles while the pipeline fills and drains, p - 1 stage times; interleaving makes a stage 1/v as long; fractions.Fraction keeps the ratio exact.")


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
    raise NotImplementedError("hint: the last stage calls loss.backward(); the others dist.recv a gradient shaped like the output and pass it to torch.autograd.backward; then dist.isend the input's .grad (contiguous).")


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
    raise NotImplementedError("hint: the max term is what couples the slices: fix it as a bound on every slice's time, and what is left is a dynamic program over prefixes of the sequence; only the distinct slice times can be the bound worth trying.")
