"""Expert parallelism: a mixture-of-experts layer whose experts live on different ranks.

A **router** (a linear layer, replicated) scores each token against E experts; each token goes
to its top-k experts, weighted by its renormalised router probabilities (the *gates*). Experts
are MLPs. Each expert takes at most ``capacity = ceil(capacity_factor · k · T / E)`` tokens from
a group of T tokens (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021):
choices are served in priority order — every token's first choice, in token order, then every
token's second choice, and so on — and a choice that finds its expert full is **dropped** (it
contributes nothing; in a transformer the residual connection carries the token on).

With P ranks, rank r holds experts r·E/P … (r+1)·E/P − 1 and its own group of tokens (its slice
of the batch). The layer (`ExpertParallelMoE`) runs:

    route locally -> dispatch buffer (E, capacity, h) -> all-to-all -> local experts
                  -> all-to-all back -> combine with the gates

Each all-to-all moves, from every rank to every other, one (E/P, capacity, h) block: rank r
sends and receives (P−1)/P · E · capacity · h elements per all-to-all, four per training step
(two forward, two backward). `all_to_all` builds it from point-to-point messages (P−1 rounds; in
round s, rank r sends to r+s and receives from r−s) and is checked against
``dist.all_to_all_single``. `moe_reference` is the same layer in one process, group by group.

**Router balance.** Nothing in the task loss stops a router from sending most tokens to a few
experts, which then overflow their capacity while others idle. `load_balancing_loss` (Switch
Transformer) and `router_z_loss` (ST-MoE) are the auxiliary losses that prevent it;
`labkit.tensor_parallel.router_training` trains a router with and without them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from labkit.checks import check_int, check_real


@dataclass(frozen=True)
class MoEConfig:
    """``experts`` E, each an MLP hidden → ``ffn`` → hidden; ``top_k`` experts per token;
    ``capacity_factor`` (slots per expert = ceil(factor · k · tokens / E))."""

    hidden: int = 16
    experts: int = 4
    ffn: int = 32
    top_k: int = 2
    capacity_factor: float = 1.25

    def __post_init__(self):
        for name in ("hidden", "experts", "ffn"):
            check_int("MoEConfig", name, getattr(self, name), minimum=1)
        check_int("MoEConfig", "top_k", self.top_k, minimum=1, maximum=self.experts)
        check_real("MoEConfig", "capacity_factor", self.capacity_factor, positive=True)

    def capacity(self, tokens: int) -> int:
        """Slots per expert for a group of ``tokens`` tokens."""
        return math.ceil(self.capacity_factor * self.top_k * tokens / self.experts)


class Expert(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.hidden, cfg.ffn)
        self.proj = nn.Linear(cfg.ffn, cfg.hidden)

    def forward(self, x):                          # (..., h) -> (..., h)
        return self.proj(F.gelu(self.fc(x)))


class MoE(nn.Module):
    """All E experts and the router, in one process (the weights every version starts from)."""

    def __init__(self, cfg: MoEConfig, seed: int = 0, dtype: torch.dtype = torch.float64):
        super().__init__()
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.router = nn.Linear(cfg.hidden, cfg.experts, bias=False)
            self.experts = nn.ModuleList(Expert(cfg) for _ in range(cfg.experts))
        self.to(dtype)

    def forward(self, x: torch.Tensor, groups: int = 1):
        return moe_reference(self, x, groups)


@dataclass
class Routing:
    """One group's routing: ``slot`` (T, k) position of each choice in its expert's buffer, −1 if
    dropped; ``expert`` (T, k) and ``gate`` (T, k) of each choice; ``capacity``; ``dropped`` count."""

    expert: torch.Tensor
    gate: torch.Tensor
    slot: torch.Tensor
    capacity: int
    dropped: int


def route(router: nn.Module, x: torch.Tensor, cfg: MoEConfig) -> Routing:
    """Top-k routing of a group of tokens x (T, h) with capacity (module docstring)."""
    T = x.shape[0]
    probs = torch.softmax(router(x), dim=-1)                        # (T, E)
    top, expert = probs.topk(cfg.top_k, dim=-1)                     # (T, k)
    gate = top / top.sum(dim=-1, keepdim=True)
    capacity = cfg.capacity(T)
    order = expert.t().reshape(-1)                                  # priority: first choices first, by token
    seen = F.one_hot(order, cfg.experts).cumsum(dim=0)              # (k·T, E): choices of each expert so far
    place = seen.gather(1, order[:, None]).squeeze(1) - 1           # each choice's place in its expert's queue
    slot = torch.where(place < capacity, place, -1).view(cfg.top_k, T).t().contiguous()
    return Routing(expert, gate, slot, capacity, int((slot < 0).sum()))


def dispatch(x: torch.Tensor, r: Routing, experts: int) -> torch.Tensor:
    """The (E, capacity, h) buffer of tokens per expert slot (zeros in unused slots)."""
    buf = x.new_zeros(experts, r.capacity, x.shape[1])
    kept = r.slot >= 0
    t_idx, j_idx = kept.nonzero(as_tuple=True)
    return buf.index_put((r.expert[t_idx, j_idx], r.slot[t_idx, j_idx]), x[t_idx])


def combine(out: torch.Tensor, r: Routing) -> torch.Tensor:
    """y (T, h) = Σ over kept choices of gate · expert output at that choice's slot."""
    T, k = r.slot.shape
    y = out.new_zeros(T, out.shape[2])
    kept = r.slot >= 0
    t_idx, j_idx = kept.nonzero(as_tuple=True)
    contrib = out[r.expert[t_idx, j_idx], r.slot[t_idx, j_idx]] * r.gate[t_idx, j_idx, None]
    return y.index_add(0, t_idx, contrib)


def moe_reference(moe: MoE, x: torch.Tensor, groups: int = 1):
    """One process: x (N, h) cut into ``groups`` equal groups, each routed with its own capacity.
    Returns (y (N, h), dropped choices in all)."""
    check_int("moe_reference", "groups", groups, minimum=1)
    if x.dim() != 2 or x.shape[0] % groups:
        raise ValueError(f"moe_reference: x must be (tokens, hidden) with tokens divisible by groups={groups}, "
                         f"got {tuple(x.shape)}")
    ys, dropped = [], 0
    for xg in x.chunk(groups):
        r = route(moe.router, xg, moe.cfg)
        buf = dispatch(xg, r, moe.cfg.experts)                       # (E, C, h)
        out = torch.stack([moe.experts[e](buf[e]) for e in range(moe.cfg.experts)])
        ys.append(combine(out, r))
        dropped += r.dropped
    return torch.cat(ys), dropped


# --------------------------------------------------------------------------- router balance

# BEGIN SOLUTION (labkit's checked loss, shown in Lab 14: lab14_long_context)
def load_balancing_loss(router_logits: torch.Tensor, top_k: int = 1) -> torch.Tensor:
    """Switch Transformer's auxiliary load-balancing loss (Fedus et al. 2021), E · Σᵢ fᵢ · Pᵢ.

    router_logits: (T, E), one row per token. fᵢ is the fraction of the T·k top-k choices that
    go to expert i (a count: no gradient flows through it) and Pᵢ the mean over tokens of the
    router's softmax probability for expert i (differentiable). The loss is 1 when both are
    uniform and grows as the router favours some experts; its gradient pushes down the
    probabilities of the experts that receive the most choices. Scaled by a small α (0.01 in
    the paper) and added to the task loss."""
    if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 2:
        got = getattr(router_logits, "shape", type(router_logits).__name__)
        raise ValueError(f"load_balancing_loss: router_logits must be a (tokens, experts) tensor, "
                         f"got {got}")
    tokens, experts = router_logits.shape
    top_k = check_int("load_balancing_loss", "top_k", top_k, minimum=1, maximum=experts)
    probs = torch.softmax(router_logits, dim=-1)                                # (T, E)
    chosen = probs.topk(top_k, dim=-1).indices                                  # (T, k)
    counts = torch.bincount(chosen.reshape(-1), minlength=experts).to(probs.dtype)   # (E,) choices
    f = counts / (tokens * top_k)                                               # (E,), sums to 1
    return experts * (f * probs.mean(dim=0)).sum()
# END SOLUTION


def router_z_loss(router_logits: torch.Tensor) -> torch.Tensor:
    """ST-MoE's router z-loss (Zoph et al. 2022): the mean over tokens of (log Σ_e exp zₑ)².
    It keeps the router's logits small, where the softmax is well conditioned in low precision."""
    if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 2:
        raise ValueError("router_z_loss: router_logits must be a (tokens, experts) tensor")
    return torch.logsumexp(router_logits, dim=-1).pow(2).mean()


def expert_load(expert: torch.Tensor, experts: int) -> torch.Tensor:
    """(E,) choices per expert from a Routing's ``expert`` (T, k) indices (before capacity)."""
    return torch.bincount(expert.reshape(-1), minlength=experts)


# --------------------------------------------------------------------------- all-to-all

def all_to_all(chunks: list[torch.Tensor], stats: dict | None = None) -> list[torch.Tensor]:
    """Rank r sends ``chunks[q]`` to rank q and returns what every rank q sent it (index q), all
    chunks of one shape. P−1 rounds of paired isend/irecv; ``stats`` counts bytes_sent/messages."""
    rank, P = dist.get_rank(), dist.get_world_size()
    if len(chunks) != P or any(c.shape != chunks[0].shape for c in chunks):
        raise ValueError(f"all_to_all: need {P} chunks of one shape, got {[tuple(c.shape) for c in chunks]}")
    out = [None] * P
    out[rank] = chunks[rank].clone()
    for s in range(1, P):
        dst, src = (rank + s) % P, (rank - s) % P
        send = chunks[dst].contiguous()
        recv = torch.empty_like(send)
        ops = [dist.P2POp(dist.isend, send, dst), dist.P2POp(dist.irecv, recv, src)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        out[src] = recv
        if stats is not None:
            stats["bytes_sent"] = stats.get("bytes_sent", 0) + send.numel() * send.element_size()
            stats["messages"] = stats.get("messages", 0) + 1
    return out


class _AllToAll(torch.autograd.Function):
    """Forward: all_to_all over the leading dim cut in P blocks; backward: the same exchange of the
    gradients, which sends every block back where it came from."""

    @staticmethod
    def forward(ctx, x, stats):
        ctx.stats = stats
        return torch.cat(all_to_all(list(x.chunk(dist.get_world_size())), stats))

    @staticmethod
    def backward(ctx, g):
        return torch.cat(all_to_all(list(g.chunk(dist.get_world_size())), ctx.stats)), None


class ExpertParallelMoE(nn.Module):
    """This rank's share of an `MoE`: the replicated router and experts r·E/P … (r+1)·E/P − 1.

    ``forward(x)`` takes this rank's group of tokens x (T, h) and returns (y (T, h), dropped).
    ``stats`` accumulates bytes sent by the all-to-alls (forward and backward)."""

    def __init__(self, moe: MoE):
        super().__init__()
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        E = moe.cfg.experts
        if E % self.world:
            raise ValueError(f"ExpertParallelMoE: {E} experts do not split evenly over {self.world} ranks")
        self.cfg, self.local = moe.cfg, E // self.world
        self.router = moe.router
        first = self.rank * self.local
        self.experts = nn.ModuleList(moe.experts[first:first + self.local])
        self.stats: dict = {}

    def forward(self, x: torch.Tensor):
        r = route(self.router, x, self.cfg)
        buf = dispatch(x, r, self.cfg.experts)                      # (E, C, h), block q for rank q
        got = _AllToAll.apply(buf, self.stats)                      # (P·E/P, C, h): from each rank, my experts
        got = got.view(self.world, self.local, r.capacity, -1)      # (P, E/P, C, h)
        out = torch.stack([self.experts[e](got[:, e]) for e in range(self.local)], dim=1)
        back = _AllToAll.apply(out.reshape(self.cfg.experts, r.capacity, -1), self.stats)   # (E, C, h)
        return combine(back, r), r.dropped


def all_to_all_bytes(cfg: MoEConfig, tokens: int, world: int, itemsize: int) -> int:
    """Bytes one rank sends in one all-to-all: (P−1) blocks of E/P · capacity · h elements."""
    return (world - 1) * (cfg.experts // world) * cfg.capacity(tokens) * cfg.hidden * itemsize


def _load_balancing_loss(router_logits, top_k=1):
    """Switch Transformer's auxiliary load-balancing loss, E * sum_i f_i * P_i.

    router_logits: (T, E) float, one row per token, one column per expert. With the router's
    probabilities softmax(router_logits) (per row) and each token's top_k experts by
    probability: f_i is the fraction of all T * top_k choices that went to expert i (a count,
    through which no gradient flows) and P_i the mean over the T tokens of the probability of
    expert i. Return the scalar E * sum_i f_i * P_i (1 for a perfectly uniform router); its
    gradient flows through P into router_logits.
    """
    # BEGIN SOLUTION
    # HINT: E times the sum over experts of f_i·P_i: P_i from torch.softmax averaged over tokens,
    # HINT: f_i from counting the top-k choices (torch.topk, torch.bincount), which carry no gradient.
    tokens, experts = router_logits.shape
    probs = torch.softmax(router_logits, dim=-1)
    chosen = probs.topk(top_k, dim=-1).indices
    f = torch.bincount(chosen.reshape(-1), minlength=experts).to(probs.dtype) / (tokens * top_k)
    return experts * (f * probs.mean(dim=0)).sum()
    # END SOLUTION
