"""Sharded checkpoints of our FSDP with torch.distributed.checkpoint (DCP), on real gloo ranks:
saved on N ranks and loaded on M != N (N, M in 1..4, sizes that leave padding), training goes on
exactly as if never interrupted; the same checkpoint goes on in PyTorch's FSDP2; each rank's data
file holds exactly its pieces (Lab 10's stage-3 bytes less its padding, plus framing we measure);
async_save writes a snapshot while training continues.

Tolerance for parameters: 1e-12 absolute on O(0.1..1) float64 values, as in tests/test_zero.py.
Training on N ranks averages N slice-means instead of one batch mean (a different rounding, the
gap measured ~1e-14); a checkpoint itself moves bits unchanged. A resume that forgets Adam's state
misses by ~3e-2, so the check has teeth (asserted below).
"""
import io
import os
from functools import partial

import pytest
import torch
from torch import nn

from labkit.checkpoint.dcp_measure import (data_file, disk_baseline, expected_payload_bytes, file_bytes,
                                           measure_checkpoint, train_and_checkpoint, written_items)
from labkit.checkpoint.distributed import async_save_sharded, chunk_numel, load_into_fsdp2, save_sharded
from labkit.dist import RankError, launch
from labkit.model import GPTConfig, batch
from labkit.zero.formulas import model_state_bytes
from labkit.zero.fsdp import FSDP
from labkit.zero.training import build, full_params, reference_params

# root group (vocab + seq_len)·hidden = 145 elements: padded at N = 2 (1), 3 (2) and 4 (3)
ODD = GPTConfig(layers=1, hidden=5, heads=1, seq_len=6, vocab=23)
TOL = 1e-12
STEPS, MORE, GLOBAL = 2, 2, 12          # 12 rows split evenly over 1..4 ranks


def _err(params, want):
    return max((params[n] - want[n]).abs().max().item() for n in want)


# ----------------------------------------------------------------------------- layout
def test_chunk_numel_is_torch_chunks_piece():
    for numel in range(0, 14):
        for world in range(1, 6):
            pieces = [len(c) for c in torch.chunk(torch.arange(numel), world)] if numel else []
            pieces += [0] * (world - len(pieces))          # torch.chunk returns fewer pieces, not empty ones
            assert [chunk_numel(numel, world, r) for r in range(world)] == pieces, (numel, world)
    assert [chunk_numel(5, 4, r) for r in range(4)] == [2, 2, 1, 0]
    with pytest.raises(ValueError, match="chunk_numel: rank"):
        chunk_numel(5, 4, 4)
    with pytest.raises(TypeError, match="chunk_numel: numel"):
        chunk_numel(5.0, 4, 0)


class _Five(nn.Module):
    """One sharded group of 5 elements: 4 ranks hold 2, 2, 1 and 0 of them (then 1, 2, 3 padding)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.arange(1.0, 6.0).view(5, 1))

    def forward(self, x):
        return x * self.w.sum()


def _pieces(rank, world):
    model = FSDP(_Five())
    sd = model.sharded_state_dict()
    (key, d), = sd.items()
    master = model.flat_params[0]
    shares = d.to_local().numel() == 0 or d.to_local().data_ptr() == master.data_ptr()
    full = d.full_tensor()
    with torch.no_grad():
        master.fill_(-1.0)                    # padding dirtied: loading must zero it again
    model.load_sharded_state_dict({key: d})   # the same view: values stay -1, padding -> 0
    bad = None
    try:
        model.load_sharded_state_dict({})
    except KeyError as e:
        bad = str(e)
    return key, tuple(d.shape), d.to_local().numel(), shares, full, master.detach().clone(), bad


def test_sharded_state_dict_is_a_view_whose_piece_is_torch_chunks():
    runs = launch(_pieces, 4, backend="gloo")
    assert [r[2] for r in runs] == [2, 2, 1, 0]
    for rank, (key, shape, n, shares, full, master, bad) in enumerate(runs):
        assert key == "root/sharded/trainable" and shape == (5,)
        assert shares                                          # no copy: the piece is the master's storage
        assert torch.equal(full, torch.arange(1.0, 6.0))       # the global vector, no padding in it
        assert master.tolist() == [-1.0] * n + [0.0] * (2 - n)
        assert "no entry for group 'root/sharded/trainable'" in bad


# ----------------------------------------------------------------------------- resume N -> M
def _resume_each(rank, world, cfg, folders, load_optimizer=True):
    return [train_and_checkpoint(rank, world, cfg, MORE, folder, global_batch=GLOBAL,
                                 load_optimizer=load_optimizer)[:2] for folder in folders]


def test_saved_on_n_ranks_resumed_on_m_equals_the_uninterrupted_run(tmp_path):
    want = reference_params(ODD, steps=STEPS + MORE, global_batch=GLOBAL)
    folders = {n: tmp_path / f"saved-on-{n}" for n in (1, 2, 3, 4)}
    for n, folder in folders.items():
        params, _, step = launch(train_and_checkpoint, n, ODD, STEPS, None, folder, GLOBAL, backend="gloo")[0]
        assert step == STEPS and _err(params, reference_params(ODD, steps=STEPS, global_batch=GLOBAL)) < TOL
    errors = {}
    for m in (1, 2, 3, 4):
        others = [n for n in folders if n != m]
        runs = launch(_resume_each, m, ODD, [folders[n] for n in others], backend="gloo", timeout=120)
        for n, (params, losses) in zip(others, runs[0]):
            errors[(n, m)] = _err(params, want)
            assert len(losses) == MORE
    print("max |resumed - uninterrupted| by (N, M):", {k: f"{v:.1e}" for k, v in errors.items()})
    assert max(errors.values()) < TOL
    # the check has teeth: resuming without Adam's m, v and step lands elsewhere
    forgot = launch(partial(_resume_each, load_optimizer=False), 2, ODD, [folders[3]], backend="gloo")
    assert _err(forgot[0][0][0], want) > 1e-4


def test_another_models_or_an_unfinished_checkpoint_is_refused(tmp_path):
    launch(train_and_checkpoint, 2, ODD, 1, None, tmp_path, GLOBAL, backend="gloo")
    other = GPTConfig(layers=1, hidden=6, heads=2, seq_len=6, vocab=23)
    with pytest.raises(RankError, match="load_sharded: .* holds another model: group 'blocks.0/sharded/trainable'"):
        launch(train_and_checkpoint, 2, other, 1, tmp_path, None, GLOBAL, backend="gloo")
    (tmp_path / ".metadata").unlink()          # as after a save that died before its last write
    with pytest.raises(RankError, match="FileNotFoundError: load_sharded: no checkpoint in .* unfinished"):
        launch(train_and_checkpoint, 2, ODD, 1, tmp_path, None, GLOBAL, backend="gloo")


def _not_ours(rank, world, folder):
    return save_sharded(folder, nn.Linear(2, 2))


def test_save_sharded_wants_our_fsdp(tmp_path):
    with pytest.raises(RankError, match="TypeError: save_sharded: model must be a labkit.zero.fsdp.FSDP"):
        launch(_not_ours, 1, tmp_path, backend="gloo")


# ----------------------------------------------------------------------------- into PyTorch's FSDP2
def _fsdp2_resume(rank, world, cfg, folder):
    model, opt = build("torch-fsdp2", cfg, torch.float64)
    start = load_into_fsdp2(folder, model, opt)["step"]
    lo, hi = rank * GLOBAL // world, (rank + 1) * GLOBAL // world
    for step in range(start, start + MORE):
        tokens, targets = batch(cfg, GLOBAL, seed=step)
        opt.zero_grad()
        model(tokens[lo:hi], targets[lo:hi])[1].backward()
        opt.step()
    return full_params("torch-fsdp2", model)


def test_pytorch_fsdp2_goes_on_from_our_checkpoint(tmp_path):
    want = reference_params(ODD, steps=STEPS + MORE, global_batch=GLOBAL)
    launch(train_and_checkpoint, 3, ODD, STEPS, None, tmp_path, GLOBAL, backend="gloo")
    for m in (2, 4):
        params = launch(_fsdp2_resume, m, ODD, tmp_path, backend="gloo")[0]
        assert params.keys() == want.keys()
        assert _err(params, want) < TOL, m


# ----------------------------------------------------------------------------- bytes per rank
def _saved_bytes(rank, world, cfg, folder):
    model, opt = build("fsdp", cfg, torch.float32)
    tokens, targets = batch(cfg, 2, seed=rank)
    model(tokens, targets)[1].backward()
    model.finish_gradient_synchronization()
    opt.step()
    save_sharded(folder, model, opt)
    groups = [(g.layout.numel, g.layout.shard_numel, g.sharded) for _, g in model.named_groups()]
    return groups, model.padded_numel, expected_payload_bytes(model, opt)


def _framed(numel, dtype):
    buf = io.BytesIO()
    torch.save(torch.zeros(numel, dtype=dtype), buf)
    return len(buf.getvalue())


@pytest.mark.parametrize("world", [3, 4])
def test_each_rank_writes_its_pieces_and_lab10s_bytes_less_its_padding(tmp_path, world):
    """Float32 AdamW: 4 bytes of parameter + 8 of m and v per element of the rank's piece; Lab 10's
    stage-3 bytes with no gradients are 12·ΣΨ'_g/N (what the rank holds, padding included). Rank
    0 also writes the replicated items: the whole 1-D groups with their m and v, and a 4-byte step
    counter per stepped group. Each tensor is framed as a torch.save archive (measured below)."""
    runs = launch(_saved_bytes, world, ODD, tmp_path, backend="gloo")
    groups, padded, _ = runs[0]
    items = written_items(tmp_path)
    sizes = file_bytes(tmp_path)
    assert set(sizes) == {".metadata", *(data_file(r) for r in range(world))}
    whole = sum(numel for numel, _, sharded in groups if not sharded)
    framing = []
    for rank, (_, _, predicted) in enumerate(runs):
        mine = [w for w in items if w.file == data_file(rank)]
        assert sizes[data_file(rank)] == sum(w.stored for w in mine)       # the file is its items, end to end
        for w in mine:
            if w.payload is not None:                                      # float32 tensors, float32 steps
                assert w.stored == _framed(w.payload // 4, torch.float32), w.key
                framing.append(w.stored - w.payload)
        payload = sum(w.payload for w in mine if w.payload is not None)
        pieces = sum(chunk_numel(numel, world, rank) for numel, _, sharded in groups if sharded)
        padding = sum(shard - chunk_numel(numel, world, rank) for numel, shard, sharded in groups if sharded)
        replicated = (12 * whole + 4 * len(groups)) if rank == 0 else 0
        assert payload == 12 * pieces + replicated == predicted
        lab10 = model_state_bytes(padded, world, 3, param_bytes=4, grad_bytes=0, optimizer_bytes=8)
        assert payload == lab10 - 12 * padding + replicated
        print(f"N={world} rank {rank}: file {sizes[data_file(rank)]} B = tensors {payload} B "
              f"(Lab 10 {lab10:.0f} - padding {12 * padding} + replicated {replicated}) + framing")
    assert any(shard * world > numel for numel, shard, sharded in groups if sharded)   # padding present
    print(f"torch.save framing per tensor: {min(framing)}..{max(framing)} B")
    assert 1400 <= min(framing) and max(framing) <= 1700


# ----------------------------------------------------------------------------- async save
def _async_then_train(rank, world, cfg, folder):
    model, opt = build("fsdp", cfg, torch.float64)
    lo, hi = rank * GLOBAL // world, (rank + 1) * GLOBAL // world

    def train(first, last):
        for step in range(first, last):
            tokens, targets = batch(cfg, GLOBAL, seed=step)
            opt.zero_grad()
            model(tokens[lo:hi], targets[lo:hi])[1].backward()
            model.finish_gradient_synchronization()
            opt.step()

    train(0, STEPS)
    future = async_save_sharded(folder, model, opt, extra={"step": STEPS})
    train(STEPS, STEPS + 3)                      # the masters change in place while the thread writes
    future.result()
    return model.gather_full_params()


def test_async_save_writes_a_snapshot_while_training_goes_on(tmp_path):
    runs = launch(_async_then_train, 2, ODD, tmp_path, backend="gloo")
    assert _err(runs[0], reference_params(ODD, steps=STEPS + 3, global_batch=GLOBAL)) < TOL   # undisturbed
    resumed = launch(train_and_checkpoint, 3, ODD, MORE, tmp_path, backend="gloo")[0][0]
    assert _err(resumed, reference_params(ODD, steps=STEPS + MORE, global_batch=GLOBAL)) < TOL


# ----------------------------------------------------------------------------- bandwidth
def test_disk_baseline_times_a_write_and_a_read(tmp_path):
    write_s, read_s = disk_baseline(tmp_path, 1 << 20, repeat=1)
    assert write_s > 0 and read_s > 0 and os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="disk_baseline: nbytes"):
        disk_baseline(tmp_path, 0)


def test_measured_save_load_and_async_block(tmp_path):
    """Timing on a busy 2-core machine: only shapes are asserted. The async call copies the state
    (memory speed); the blocking save also plans, writes, fsyncs and writes metadata, so the call
    blocks for less than the save takes (measured ~0.25x)."""
    result = measure_checkpoint(2, repeat=3, folder=tmp_path)
    print(result.table())
    print(result.bytes_table())
    assert result.total_bytes == sum(r["bytes"] for r in result.ranks) + result.ranks[0]["metadata_bytes"]
    for r in result.ranks:
        assert r["bytes"] - r["payload"] > 0 and r["formula"] > 0
    assert 0 < result.hidden_fraction < 1
    assert all(v > 0 for v in result.bandwidth().values())
    assert max(len(line) for line in str(result.table()).splitlines()) <= 100
    assert max(len(line) for line in str(result.bytes_table()).splitlines()) <= 100
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="measure_checkpoint: world"):
        measure_checkpoint(0)
