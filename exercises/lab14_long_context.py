"""Lab 14 exercises: long sequences, sharding specs and experts.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

- ``softmax_step``: one block of the online softmax, the arithmetic of every ring attention step;
- ``all_to_all_4d``: DeepSpeed-Ulysses' exchange between sequence-split and head-split tensors;
- ``einsum_placement``: the output placement of an einsum on one mesh dimension, as DTensor does it;
- ``load_balancing_loss``: Switch Transformer's auxiliary loss that keeps a router balanced.
"""
import torch  # noqa: F401
import torch.distributed as dist  # noqa: F401


def softmax_step(m, l, acc, scores, v):  # noqa: E741
    """Fold one block of keys into a running softmax-attention state; return the new (m, l, acc).

    The state of each query row, after the blocks seen so far: ``m`` (..., Sq) the largest score,
    ``l`` (..., Sq) the sum of exp(score - m), ``acc`` (..., Sq, D) the sum of exp(score - m) * v.
    A fresh state is m = -inf, l = 0, acc = 0. The new block: ``scores`` (..., Sq, Sk) and its
    values ``v`` (..., Sk, D). After the last block the attention output is acc / l.

    Rescale the old sums when the maximum grows (by exp(m_old - m_new)), so that no exp() ever
    sees a positive argument. A score of -inf (a masked key) counts for nothing; a row whose
    scores are all -inf so far must keep m = -inf, l = 0, acc = 0 (no NaN: beware -inf - -inf).
    Do not modify the arguments in place.
    """
    raise NotImplementedError("hint: online softmax: carry per row a running max, a running sum of exponentials and an unnormalised output; when a new block raises the max, rescale what you carried. Rows that have seen only masked scores need care (torch.where).")


def all_to_all_4d(x, scatter_dim, gather_dim, group=None):
    """DeepSpeed-Ulysses' re-sharding: cut x into N equal pieces along ``scatter_dim``, send piece j
    to rank j, and return the N pieces received (from ranks 0, 1, ..., N-1, in that order) joined
    along ``gather_dim``.

    x: a tensor of the same shape on every rank of ``group`` (None: all ranks); its size along
    scatter_dim is divisible by N. With (B, H, S/N, D) inputs, scatter_dim=1 and gather_dim=2
    turn "all heads of my S/N positions" into "H/N heads of all S positions"; (2, 1) turns it
    back. Use one ``dist.all_to_all_single`` (or ``dist.all_to_all``) call; on one rank return x.
    """
    raise NotImplementedError("hint: an all-to-all sends piece j of your tensor to rank j and receives rank j's piece for you: cut along the dimension to scatter, exchange (dist.all_to_all_single), and join what arrives along the dimension to gather.")


def einsum_placement(equation, a, b):
    """The placement of ``torch.einsum(equation, A, B)`` along one mesh dimension, or None.

    equation: two operands and an explicit output, letters only, e.g. "mk,kn->mn" or
    "bmk,bkn->bmn". a, b: the operands' placements along this mesh dimension, each "R"
    (replicated), "P" (partial sums) or "S(i)" (dimension i cut into pieces). Return the
    output's placement ("R", "P" or "S(i)") when DTensor can compute it with no communication,
    and None when an operand must first be redistributed (a collective).

    Rules: R with R is R. P with R (either order) is P. An operand cut along letter x, with the
    other cut along the same letter or replicated (a replicated operand can cut itself locally,
    for free), gives S(position of x in the output), or P if x is summed away. Everything else
    (cuts along different letters, P with S, P with P) is None.
    """
    raise NotImplementedError("hint: follow each index letter of the einsum: what happens to a sharded letter that survives into the output, to one that is summed over, and to a partial sum multiplied by a replicated operand?")


def load_balancing_loss(router_logits, top_k=1):
    """Switch Transformer's auxiliary load-balancing loss, E * sum_i f_i * P_i.

    router_logits: (T, E) float, one row per token, one column per expert. With the router's
    probabilities softmax(router_logits) (per row) and each token's top_k experts by
    probability: f_i is the fraction of all T * top_k choices that went to expert i (a count,
    through which no gradient flows) and P_i the mean over the T tokens of the probability of
    expert i. Return the scalar E * sum_i f_i * P_i (1 for a perfectly uniform router); its
    gradient flows through P into router_logits.
    """
    raise NotImplementedError("hint: E times the sum over experts of f_i·P_i: P_i from torch.softmax averaged over tokens, f_i from counting the top-k choices (torch.topk, torch.bincount), which carry no gradient.")
