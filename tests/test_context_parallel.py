"""Context parallelism (labkit.context_parallel): ring attention and DeepSpeed-Ulysses on 1, 2 and 4
real gloo ranks against full attention in one process, the bytes they send against the closed
forms, and the causal work per rank.

Tolerance: float64 throughout; ring attention adds the softmax's terms block by block in another
order than one softmax (and its backward sums the blocks' shares of dK, dV round the ring), so
outputs and gradients agree to 1e-12 absolute on O(1) values; Ulysses moves data unchanged and
runs the same attention per head: also 1e-12. Byte counts and work counts are exact.
"""
import itertools

import pytest
import torch
import torch.distributed as dist

from labkit.collectives.counting import count_collectives
from labkit.context_parallel import formulas, layout, reference_attention, ring_attention, ulysses_attention
from labkit.context_parallel.attention import softmax_step
from labkit.context_parallel.schedule import ring_schedule, work
from labkit.dist import RankError, launch

SHAPE = (2, 4, 16, 3)          # (B, H, S, D): S divisible by 2N for N = 1, 2, 4
TOL = 1e-12
COMBOS = list(itertools.product(("ring", "ulysses"), (False, True), layout.LAYOUTS))


def _data():
    g = torch.Generator().manual_seed(11)
    return [torch.randn(*SHAPE, dtype=torch.float64, generator=g) for _ in range(4)]


def _all_combos(rank, world):
    q, k, v, up = _data()
    out = {}
    for method, causal, lay in COMBOS:
        mine = [layout.shard(t, world, lay)[rank].clone().requires_grad_() for t in (q, k, v)]
        fn = ring_attention if method == "ring" else ulysses_attention
        stats = {}
        with count_collectives() as fwd:
            y = fn(*mine, causal=causal, layout=lay, stats=stats)
        with count_collectives() as bwd:
            (y * layout.shard(up, world, lay)[rank]).sum().backward()
        out[method, causal, lay] = {"y": y.detach(), "grads": [t.grad for t in mine], "stats": stats,
                                    "fwd": sum(c.bytes_sent for c in fwd), "bwd": sum(c.bytes_sent for c in bwd),
                                    "ops": sorted({c.op for c in fwd + bwd})}
    return out


@pytest.fixture(scope="module")
def runs():
    return {n: launch(_all_combos, n, backend="gloo", timeout=240) for n in (1, 2, 4)}


@pytest.mark.parametrize("world", (1, 2, 4))
@pytest.mark.parametrize("method,causal,lay", COMBOS)
def test_equals_full_attention_outputs_and_gradients(runs, world, method, causal, lay):
    q, k, v, up = _data()
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    want = reference_attention(*full, causal)
    (want * up).sum().backward()
    res = [r[method, causal, lay] for r in runs[world]]
    got = layout.unshard([r["y"] for r in res], lay)
    assert (got - want.detach()).abs().max().item() < TOL
    for i, name in enumerate("qkv"):
        grad = layout.unshard([r["grads"][i] for r in res], lay)
        assert (grad - full[i].grad).abs().max().item() < TOL, f"gradient of {name}"


@pytest.mark.parametrize("world", (1, 2, 4))
@pytest.mark.parametrize("method,causal,lay", COMBOS)
def test_bytes_per_rank_equal_the_closed_forms(runs, world, method, causal, lay):
    want = (formulas.ring_bytes if method == "ring" else formulas.ulysses_bytes)(*SHAPE, world, 8)
    for rank, r in enumerate(runs[world]):
        res = r[method, causal, lay]
        assert (res["fwd"], res["bwd"]) == (want["forward"], want["backward"]), f"rank {rank}"
        assert res["stats"].get("bytes_sent", 0) == want["forward"] + want["backward"]
        assert res["ops"] == ([] if world == 1 else ["send"] if method == "ring" else ["all_to_all"])


def test_ulysses_sends_n_over_2_times_less_than_ring_forward():
    for n in (2, 4, 8, 16):
        ring, uly = formulas.ring_bytes(1, 16, 1024, 64, n), formulas.ulysses_bytes(1, 16, 1024, 64, n)
        assert ring["forward"] * 2 == uly["forward"] * n


@pytest.mark.parametrize("world", (1, 2, 4))
@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("lay", layout.LAYOUTS)
def test_work_per_rank_is_the_schedule_and_the_closed_form(runs, world, causal, lay):
    b, h, s, _ = SHAPE
    counted = [r["ring", causal, lay]["stats"]["score_elements"] for r in runs[world]]
    planned = [b * h * w for w in work(ring_schedule(world, s, causal, lay))]
    closed = [formulas.score_elements(r, world, s, causal, lay, b, h) for r in range(world)]
    assert counted == planned == closed


def test_causal_contiguous_chunks_are_imbalanced_and_zigzag_is_not():
    for n in (2, 4, 8):
        contiguous = work(ring_schedule(n, 16 * n, True, "contiguous"))
        zigzag = work(ring_schedule(n, 16 * n, True, "zigzag"))
        assert max(contiguous) / (sum(contiguous) / n) == pytest.approx(2 * n / (n + 1), rel=1e-12)
        assert len(set(zigzag)) == 1 and sum(zigzag) < sum(contiguous)


def test_measured_flops_follow_the_work_count():
    from labkit.context_parallel.lab import causal_work_table

    table = causal_work_table(world=4, shape=(1, 2, 32, 4))
    for measured, predicted in zip(table.column("FLOPs per rank (measured)"), table.column("4·D·score entries")):
        assert measured == predicted
    assert table.column("max / mean") == pytest.approx([1.6, 1.0])


def _order_rank(rank, world):
    from labkit.context_parallel import ring

    log = []
    real_pass, real_block = ring._pass_on, ring.forward_block
    ring._pass_on = lambda *a, **k: (log.append("post"), real_pass(*a, **k))[1]
    ring.forward_block = lambda *a, **k: (log.append("compute"), real_block(*a, **k))[1]
    q, k, v, _ = _data()
    ring_attention(*(layout.shard(t, world)[rank] for t in (q, k, v)))
    return log


def test_each_hop_is_posted_before_the_compute_it_overlaps():
    log = launch(_order_rank, 4, backend="gloo", timeout=60)[0]
    assert log == ["post", "compute"] * 3 + ["compute"]


def test_layouts_shard_and_unshard():
    x = torch.arange(2 * 3 * 16 * 1).view(2, 3, 16, 1)
    for lay, n in itertools.product(layout.LAYOUTS, (1, 2, 4)):
        pieces = layout.shard(x, n, lay)
        assert torch.equal(layout.unshard(pieces, lay), x)
    assert layout.positions(1, 4, 16, "zigzag").tolist() == [2, 3, 12, 13]
    with pytest.raises(ValueError, match="zigzag layout over 4 ranks needs the sequence length divisible by 8"):
        layout.spans(0, 4, 12, "zigzag")
    with pytest.raises(ValueError, match="layout must be one of"):
        layout.spans(0, 2, 8, "striped")


def test_softmax_step_survives_large_and_masked_scores():
    g = torch.Generator().manual_seed(0)
    s = [1000 * torch.randn(3, 4, dtype=torch.float64, generator=g) for _ in range(3)]
    s[0][0] = float("-inf")                                     # row 0 sees nothing in the first block
    v = [torch.randn(4, 2, dtype=torch.float64, generator=g) for _ in range(3)]
    state = (torch.full((3,), float("-inf"), dtype=torch.float64), torch.zeros(3, dtype=torch.float64),
             torch.zeros(3, 2, dtype=torch.float64))
    state = softmax_step(*state, s[0], v[0])
    assert state[0][0] == float("-inf") and state[1][0] == 0 and not torch.isnan(state[2]).any()
    for sj, vj in zip(s[1:], v[1:]):
        state = softmax_step(*state, sj, vj)
    want = torch.softmax(torch.cat(s, -1), -1) @ torch.cat(v)
    assert (state[2] / state[1][:, None] - want).abs().max() < TOL


def _bad_rank(rank, world, what):
    q = torch.zeros(1, 3, 4, 2, dtype=torch.float64)
    if what == "heads":
        ulysses_attention(q, q, q)
    elif what == "shape":
        ring_attention(q, q, q[..., :1])
    elif what == "seq":
        ring_attention(q[:, :, :3], q[:, :, :3], q[:, :, :3], layout="zigzag")


@pytest.mark.parametrize("what,message", [
    ("heads", "ulysses_attention: 3 heads do not split over 2 ranks"),
    ("shape", "ring_attention: q, k, v must have one shape"),
    ("seq", "spans: a zigzag layout over 2 ranks needs the sequence length divisible by 4, got 6")])
def test_bad_input_is_one_line(what, message):
    with pytest.raises(RankError, match=message):
        launch(_bad_rank, 2, what, backend="gloo", timeout=60)


def test_without_a_process_group_says_so():
    q = torch.zeros(1, 2, 4, 2)
    with pytest.raises(RuntimeError, match="ring_attention: no process group"):
        ring_attention(q, q, q)


def _torch_cp_on_cpu(rank, world):
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    mesh = init_device_mesh("cpu", (world,))
    q, k, v, _ = _data()
    try:
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    except NotImplementedError as e:
        return str(e)
    return "ran"


def test_torch_context_parallel_on_cpu_is_refused_as_the_notebook_says():
    """The notebook says PyTorch's context_parallel cannot run on CPU (it shards only CUDA's attention
    kernels); if a torch release adds CPU support, this fails and the notebook should compare."""
    from labkit.context_parallel.lab import torch_context_parallel

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the notebook compares with PyTorch's context_parallel instead")
    said = launch(_torch_cp_on_cpu, 2, backend="gloo", timeout=120)
    assert all("does not have a sharding strategy registered" in s for s in said), said
    assert "needs 2 CUDA GPUs" in torch_context_parallel(2)


@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.device_count() >= 2 and dist.is_nccl_available()),
                    reason="needs 2 CUDA GPUs with NCCL: compares with PyTorch's context_parallel there")
def test_torch_context_parallel_agrees_on_gpus():
    from labkit.context_parallel.lab import torch_context_parallel

    line = torch_context_parallel(2)
    assert float(line.rsplit(" ", 1)[1]) < 1e-4, line          # float32 kernels, sums in another order
