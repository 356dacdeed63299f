"""Known-wrong: the textbook update without a guard: a row whose scores are all -inf so far
computes exp(-inf - -inf) = NaN, which then spreads through every later block."""
from solutions.lab14_long_context import *  # noqa: F401,F403
from solutions.lab14_long_context import torch


def softmax_step(m, l, acc, scores, v):  # noqa: E741
    m_new = torch.maximum(m, scores.amax(dim=-1))
    alpha = torch.exp(m - m_new)                          # BUG: NaN where m and m_new are both -inf
    p = torch.exp(scores - m_new[..., None])
    return m_new, l * alpha + p.sum(dim=-1), acc * alpha[..., None] + p @ v
