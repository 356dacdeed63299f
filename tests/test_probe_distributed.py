"""Probe: the distributed wrappers (DDP, ShardedOptimizer, FSDP, tensor parallelism) given bad input
on 2 real gloo ranks.

Every case below raises, on every rank, a one-line error of the stated type whose message names
the argument — none hangs, aborts a rank (gloo's SIGABRT on mismatched sizes) or silently
overwrites one rank's rows with another's. Ranks that disagree on shapes or dtypes are caught at
construction by one collective (`labkit.checks.check_same_on_ranks`); tensor-parallel layers built
from differently seeded copies split rank 0's weights (they are broadcast, as PyTorch's
``distribute_tensor`` does). All cases run in one launch: each is refused on every rank alike, so
the ranks go on to the next case together.
"""
import pytest
import torch
from torch import nn

from labkit.data_parallel import DDP
from labkit.dist import launch
from labkit.model import GPT, GPTConfig, batch
from labkit.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from labkit.tensor_parallel.parallelize import parallelize
from labkit.tensor_parallel.blocks import ParallelAttention, ParallelMLP
from labkit.tensor_parallel.vocab import VocabParallelEmbedding
from labkit.zero import FSDP, ShardedOptimizer

CFG = GPTConfig(layers=1, hidden=8, heads=2, seq_len=4, vocab=16)


def _per_rank(rank, a, b):
    return a if rank == 0 else b


def _finish_twice(rank):
    ddp = DDP(nn.Linear(4, 2))
    ddp(torch.randn(3, 4)).sum().backward()
    ddp.finish_gradient_synchronization()
    ddp.finish_gradient_synchronization()


def _no_sync_then_finish(rank):
    ddp = DDP(nn.Linear(4, 2))
    with ddp.no_sync():
        ddp(torch.randn(3, 4)).sum().backward()
    ddp.finish_gradient_synchronization()


def _frozen_on_one(rank):
    m = nn.Linear(4, 2)
    m.bias.requires_grad_(rank == 0)
    return m


# name -> (build(rank), exception type, words the one-line message must contain)
CASES = {
    # DDP
    "DDP shapes differ": (lambda r: DDP(_per_rank(r, nn.Linear(4, 3), nn.Linear(4, 5))), ValueError,
                          "DDP: the module's parameters and buffers differ across ranks (weight is (3, 4)"),
    "DDP dtypes differ": (lambda r: DDP(_per_rank(r, nn.Linear(4, 3), nn.Linear(4, 3).double())), ValueError,
                          "float64 on rank 1"),
    "DDP frozen on one rank": (lambda r: DDP(_frozen_on_one(r)), ValueError, "bias (frozen)"),
    "DDP different modules": (lambda r: DDP(_per_rank(r, nn.Linear(4, 3), nn.Sequential(nn.Linear(4, 3)))),
                              ValueError, "0.weight"),
    "DDP extra buffer": (lambda r: DDP(_per_rank(r, nn.Sequential(nn.Linear(4, 4)),
                                                 nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))),
                         ValueError, "rank 0 has 2, rank 1 has"),
    "DDP bucket_cap_mb tiny": (lambda r: DDP(nn.Linear(4, 3), bucket_cap_mb=1e-9), ValueError,
                               "DDP: bucket_cap_mb must be at least one byte"),
    "DDP bucket_cap_mb negative": (lambda r: DDP(nn.Linear(4, 3), bucket_cap_mb=-1), ValueError,
                                   "DDP: bucket_cap_mb"),
    "DDP bucket_cap_mb nan": (lambda r: DDP(nn.Linear(4, 3), bucket_cap_mb=float("nan")), ValueError,
                              "DDP: bucket_cap_mb"),
    "DDP bucket_cap_mb str": (lambda r: DDP(nn.Linear(4, 3), bucket_cap_mb="1"), TypeError, "DDP: bucket_cap_mb"),
    "DDP comm": (lambda r: DDP(nn.Linear(4, 3), comm="nccl"), ValueError, "DDP: comm"),
    "DDP module": (lambda r: DDP("model"), TypeError, "DDP: module"),
    "DDP overlap": (lambda r: DDP(nn.Linear(4, 3), overlap=1), TypeError, "DDP: overlap"),
    "DDP finish twice": (_finish_twice, RuntimeError, "finish_gradient_synchronization found no gradient"),
    "DDP finish after no_sync": (_no_sync_then_finish, RuntimeError, "not after a backward inside no_sync"),
    # ShardedOptimizer (ZeRO-1/2)
    "ZeRO shapes differ": (lambda r: ShardedOptimizer(_per_rank(r, nn.Linear(4, 3), nn.Linear(4, 5)).parameters(),
                                                      torch.optim.SGD, lr=0.1), ValueError,
                           "ShardedOptimizer: the parameters differ across ranks (param_groups[0][0] is (3, 4)"),
    "ZeRO dtypes differ": (lambda r: ShardedOptimizer(_per_rank(r, nn.Linear(4, 3), nn.Linear(4, 3).half())
                                                      .parameters(), torch.optim.SGD, lr=0.1), ValueError,
                           "float16 on rank 1"),
    "ZeRO empty params": (lambda r: ShardedOptimizer([], torch.optim.SGD, lr=0.1), ValueError,
                          "ShardedOptimizer: params: optimizer got an empty parameter list"),
    "ZeRO params a tensor": (lambda r: ShardedOptimizer(torch.zeros(3), torch.optim.SGD, lr=0.1), TypeError,
                             "ShardedOptimizer: params"),
    "ZeRO bucket_cap_mb": (lambda r: ShardedOptimizer(nn.Linear(4, 3).parameters(), torch.optim.SGD,
                                                      bucket_cap_mb=-1, lr=0.1), ValueError,
                           "ShardedOptimizer: bucket_cap_mb"),
    "ZeRO stage": (lambda r: ShardedOptimizer(nn.Linear(4, 3).parameters(), torch.optim.SGD, stage=3),
                   ValueError, "ShardedOptimizer: stage"),
    "ZeRO optimizer_class": (lambda r: ShardedOptimizer(nn.Linear(4, 3).parameters(), "adam"), TypeError,
                             "ShardedOptimizer: optimizer_class"),
    # FSDP (ZeRO-3)
    "FSDP shapes differ": (lambda r: FSDP(_per_rank(r, nn.Linear(4, 3), nn.Linear(4, 5))), ValueError,
                           "FSDP: the module's parameters and buffers differ across ranks (weight is (3, 4)"),
    "FSDP dtypes differ": (lambda r: FSDP(_per_rank(r, nn.Linear(4, 3), nn.Linear(4, 3).double())), ValueError,
                           "FSDP: the module's parameters"),
    "FSDP layers differ": (lambda r: FSDP(GPT(_per_rank(r, CFG, GPTConfig(layers=2, hidden=8, heads=2, seq_len=4,
                                                                            vocab=16)))),
                           ValueError, "FSDP: the module's parameters and buffers differ across ranks"),
    "FSDP compute_dtype": (lambda r: FSDP(nn.Linear(4, 3), compute_dtype=torch.int32), TypeError,
                           "FSDP: compute_dtype"),
    "FSDP policy": (lambda r: FSDP(nn.Linear(4, 3), policy="all"), TypeError, "FSDP: policy"),
    "FSDP module": (lambda r: FSDP(3), TypeError, "FSDP: module"),
    # tensor parallelism
    "TP column shapes differ": (lambda r: ColumnParallelLinear.from_linear(
        _per_rank(r, nn.Linear(4, 4), nn.Linear(4, 6))), ValueError,
        "ColumnParallelLinear.from_linear: the full tensors differ across ranks (weight is (4, 4)"),
    "TP row dtypes differ": (lambda r: RowParallelLinear.from_linear(
        _per_rank(r, nn.Linear(4, 4), nn.Linear(4, 4).double())), ValueError, "RowParallelLinear.from_linear"),
    "TP bias on one rank": (lambda r: RowParallelLinear.from_linear(nn.Linear(4, 4, bias=r == 0)), ValueError,
                            "rank 0 has 2, rank 1 has 1"),
    "TP column a Conv2d": (lambda r: ColumnParallelLinear.from_linear(nn.Conv2d(2, 2, 1)), TypeError,
                           "ColumnParallelLinear.from_linear: linear must be a torch.nn.Linear"),
    "TP row a Conv2d": (lambda r: RowParallelLinear.from_linear(nn.Conv2d(2, 2, 1)), TypeError,
                        "RowParallelLinear.from_linear: linear"),
    "TP embedding a Linear": (lambda r: VocabParallelEmbedding.from_embedding(nn.Linear(4, 4)), TypeError,
                              "from_embedding: emb must be a torch.nn.Embedding"),
    "TP mlp a Linear": (lambda r: ParallelMLP.from_module(nn.Linear(4, 4)), TypeError,
                        "ParallelMLP.from_module: mlp must have nn.Linear fc and proj"),
    "TP attention an MLP": (lambda r: ParallelAttention.from_module(GPT(CFG).blocks[0].mlp), TypeError,
                            "ParallelAttention.from_module: attn must have nn.Linear qkv and proj"),
    "TP parallelize a Linear": (lambda r: parallelize(nn.Linear(4, 4)), TypeError, "parallelize: model"),
    "TP GPT sizes differ": (lambda r: parallelize(GPT(_per_rank(r, CFG, GPTConfig(layers=1, hidden=8, heads=2,
                                                                                  seq_len=8, vocab=16)))),
                            ValueError, "parallelize: the full tensors differ across ranks (pos_emb.weight"),
}


def _probe_rank(rank, world, names):
    out = {}
    for name in names:
        build, _, _ = CASES[name]
        try:
            build(rank)
            out[name] = ("no error", "")
        except Exception as e:
            out[name] = (type(e).__name__, str(e))
    return out


@pytest.fixture(scope="module")
def probed():
    return launch(_probe_rank, 2, list(CASES), backend="gloo", timeout=120)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_on_every_rank_in_one_line(probed, name):
    _, exc, words = CASES[name]
    for rank in range(2):
        kind, message = probed[rank][name]
        assert kind == exc.__name__, (rank, kind, message)
        assert words in message and "\n" not in message, (rank, message)


def _seeded_split(rank, world):
    torch.manual_seed(rank)                              # a mistake: each rank draws its own layer
    col = ColumnParallelLinear.from_linear(nn.Linear(4, 6), gather_output=True)
    torch.manual_seed(rank)
    row = RowParallelLinear.from_linear(nn.Linear(6, 4), input_is_parallel=False)
    tp = parallelize(GPT(CFG, seed=rank))
    tokens, _ = batch(CFG, 2, seed=0)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(7))
    return col(x).detach(), row(col(x)).detach(), tp(tokens).detach(), tp.tok_emb.start


def test_differently_seeded_tensor_parallel_layers_split_rank_0s_weights():
    out = launch(_seeded_split, 2, backend="gloo", timeout=60)
    torch.manual_seed(0)
    col, row = nn.Linear(4, 6), None
    torch.manual_seed(0)
    row = nn.Linear(6, 4)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(7))
    ref = GPT(CFG, seed=0)
    tokens, _ = batch(CFG, 2, seed=0)
    logits = ref(tokens).detach()
    for rank, (c, r, lg, start) in enumerate(out):
        torch.testing.assert_close(c, col(x).detach())              # rank 0's layer, on both ranks
        torch.testing.assert_close(r, row(col(x)).detach())
        torch.testing.assert_close(lg, logits[..., start:start + CFG.vocab // 2])


def _slow(rank, world):
    import time

    time.sleep(3600)                                     # alive, busy, never waiting on a peer


def _waits(rank, world):
    import torch.distributed as dist

    if rank == 0:
        dist.recv(torch.zeros(1), src=1)                 # rank 1 never sends


@pytest.mark.parametrize("fn,hint", [(_slow, "No rank was waiting on a peer: the work needs longer"),
                                     (_waits, "Look for a send without a matching recv")])
def test_a_timeout_says_whether_the_ranks_were_computing_or_waiting(fn, hint):
    with pytest.raises(TimeoutError) as e:
        launch(fn, 2, backend="gloo", timeout=3)
    assert hint in str(e.value) and "\n" not in str(e.value)
