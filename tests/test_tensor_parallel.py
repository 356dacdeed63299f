"""labkit.tensor_parallel on 1, 2 and 4 real gloo ranks against the unsplit labkit.model.GPT.

Tolerance: float64; a split layer adds t partial sums where the unsplit one sums in one go, and
the vocabulary-parallel loss subtracts a max before exp: results agree to rounding, 1e-12 absolute
on O(1) values.
"""
import pytest
import torch
import torch.distributed as dist
from torch import nn

from labkit.dist import RankError, launch
from labkit.model import GPT, GPTConfig, batch
from labkit.tensor_parallel import ColumnParallelLinear, RowParallelLinear, count_collectives
from labkit.tensor_parallel.parallelize import parallelize

CFG = GPTConfig(layers=2, hidden=16, heads=4, seq_len=8, vocab=32)
B = 2


def shard_of(name: str, full: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """The slice of the unsplit parameter (or gradient) ``full`` that rank ``rank`` holds."""
    if name == "tok_emb.weight" or name.endswith(("mlp.fc.weight", "mlp.fc.bias")):
        return full.chunk(world, 0)[rank]
    if name.endswith(("attn.proj.weight", "mlp.proj.weight")):
        return full.chunk(world, 1)[rank]
    if name.endswith("attn.qkv.weight") or name.endswith("attn.qkv.bias"):
        h = CFG.hidden
        part = full.view(3, h, -1) if full.dim() == 2 else full.view(3, h)
        return part.chunk(world, 1)[rank].reshape(-1, *full.shape[1:])
    return full                                                   # replicated


def _tp_rank(rank, world, sequence_parallel):
    model = GPT(CFG, seed=0, dtype=torch.float64)
    tp = parallelize(model, sequence_parallel=sequence_parallel)
    tokens, targets = batch(CFG, B, seed=1)
    with count_collectives() as fwd:
        _, loss = tp(tokens, targets)
    with count_collectives() as bwd:
        loss.backward()
        tp.sync_sequence_parallel_grads()
    return loss.item(), {n: p.grad for n, p in tp.named_parameters()}, fwd, bwd


def _reference():
    model = GPT(CFG, seed=0, dtype=torch.float64)
    _, loss = model(*batch(CFG, B, seed=1))
    loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("world,sp", [(1, False), (2, False), (4, False), (2, True), (4, True)])
def test_tensor_parallel_gpt_equals_the_unsplit_model(world, sp):
    want_loss, want = _reference()
    L, bsh, bs = CFG.layers, B * CFG.seq_len * CFG.hidden, B * CFG.seq_len
    for rank, (loss, grads, fwd, bwd) in enumerate(launch(_tp_rank, world, sp, backend="gloo", timeout=120)):
        assert loss == pytest.approx(want_loss, abs=1e-12)
        assert set(grads) == set(want)
        for name, g in grads.items():
            torch.testing.assert_close(g, shard_of(name, want[name], rank, world), rtol=0, atol=1e-12,
                                       msg=lambda m: f"rank {rank} {name}: {m}")
        ops = lambda recs: sorted((c.op, c.numel) for c in recs)            # noqa: E731
        if world == 1:
            assert fwd == [] and bwd == []
        elif not sp:   # per layer 2 forward + 2 backward all-reduces of b·s·h; embedding, head, loss
            assert ops(fwd) == sorted([("all_reduce", bsh)] * (2 * L + 1) + [("all_reduce", bs)] * 3)
            assert ops(bwd) == [("all_reduce", bsh)] * (2 * L + 1)
        else:          # each all-reduce becomes a reduce-scatter or an all-gather of the same tensor
            assert ops(fwd) == sorted([("reduce_scatter", bsh)] * (2 * L + 1) + [("all_gather", bsh)] * (2 * L + 1)
                                      + [("all_reduce", bs)] * 3)
            big = [c for c in bwd if c.phase == "backward"]
            assert ops(big) == sorted([("reduce_scatter", bsh)] * (2 * L + 1) + [("all_gather", bsh)] * (2 * L + 1))
            assert [c.phase for c in bwd if c not in big] == ["after backward"]


def _pairing_rank(rank, world):
    torch.manual_seed(0)
    fc, proj = nn.Linear(16, 64, dtype=torch.float64), nn.Linear(64, 16, dtype=torch.float64)
    x = torch.randn(2, 8, 16, dtype=torch.float64, requires_grad=True)
    want = proj(torch.nn.functional.gelu(fc(x)))
    out = {}
    for name, (col, row) in {
        "megatron": (ColumnParallelLinear.from_linear(fc), RowParallelLinear.from_linear(proj)),
        "gather between": (ColumnParallelLinear.from_linear(fc, gather_output=True),
                           RowParallelLinear.from_linear(proj, input_is_parallel=False)),
    }.items():
        xx = x.detach().clone().requires_grad_()
        with count_collectives() as recs:
            y = row(torch.nn.functional.gelu(col(xx)))
            y.sum().backward()
        out[name] = ((y - want).abs().max().item(), sum(c.bytes_sent for c in recs),
                     sorted((c.op, c.phase) for c in recs))
    return out


def test_megatron_pairing_moves_fewer_bytes_than_gathering_in_between():
    p, S = 2, 2 * 8 * 16 * 8                      # bytes of one (b, s, h) float64 activation
    for res in launch(_pairing_rank, p, backend="gloo", timeout=60):
        err_m, bytes_m, ops_m = res["megatron"]
        err_g, bytes_g, ops_g = res["gather between"]
        assert err_m < 1e-12 and err_g < 1e-12
        assert ops_m == [("all_reduce", "backward"), ("all_reduce", "forward")]
        assert bytes_m == 2 * 2 * (p - 1) / p * S                     # 2 all-reduces of b·s·h
        # gathering the (b, s, 4h) activation, and its gradient, adds 2 all-gathers of 4·S
        assert bytes_g == bytes_m + 2 * (p - 1) / p * 4 * S > bytes_m


def _bad_rank(rank, world, what):
    if what == "divisible":
        ColumnParallelLinear.from_linear(nn.Linear(4, 5))
    else:
        RowParallelLinear.from_linear(nn.Linear(8, 4))(torch.zeros(2, 8))


def test_bad_input_is_a_one_line_error():
    with pytest.raises(RankError, match=r"out_features \(5\) must be divisible by the number of ranks \(2\)"):
        launch(_bad_rank, 2, "divisible", backend="gloo", timeout=30)
    with pytest.raises(RankError, match="input has 8 features in its last dim, this rank expects 4"):
        launch(_bad_rank, 2, "width", backend="gloo", timeout=30)
    with pytest.raises(TypeError, match="labkit.model.GPT"):
        parallelize(nn.Linear(2, 2))


def _saved_rank(rank, world):
    from labkit.tensor_parallel.activations import saved_bytes

    out = {}
    for sp in (False, True):
        tp = parallelize(GPT(CFG, seed=0, dtype=torch.float64), sequence_parallel=sp)
        out[sp] = saved_bytes(tp, lambda: tp(*batch(CFG, B, seed=1)))
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_sequence_parallelism_divides_layernorm_activations_by_t(world):
    model = GPT(CFG, seed=0, dtype=torch.float64)
    from labkit.tensor_parallel.activations import saved_bytes

    unsplit = saved_bytes(model, lambda: model(*batch(CFG, B, seed=1)))
    # per LayerNorm: its input (B, T, h) and mean, rstd (B, T, 1) in float64; 2 per layer + ln_f
    assert unsplit == (2 * CFG.layers + 1) * B * CFG.seq_len * (CFG.hidden + 2) * 8
    for per_rank in launch(_saved_rank, world, backend="gloo", timeout=60):
        assert per_rank[False] == unsplit                      # plain TP replicates these regions
        assert per_rank[True] * world == unsplit               # sequence parallel: 1/t of them
