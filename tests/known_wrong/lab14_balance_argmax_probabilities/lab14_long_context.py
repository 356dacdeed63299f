"""Known-wrong: P is taken from the argmax (one-hot) instead of the router's probabilities, so P
equals f and no gradient reaches the router: the loss measures imbalance but cannot fix it."""
from solutions.lab14_long_context import *  # noqa: F401,F403
from solutions.lab14_long_context import torch


def load_balancing_loss(router_logits, top_k=1):
    tokens, experts = router_logits.shape
    chosen = router_logits.topk(top_k, dim=-1).indices
    f = torch.bincount(chosen.reshape(-1), minlength=experts).to(router_logits.dtype) / (tokens * top_k)
    hard = torch.nn.functional.one_hot(router_logits.argmax(dim=-1), experts).to(router_logits.dtype)
    return experts * (f * hard.mean(dim=0)).sum()        # BUG: argmax "probabilities"
