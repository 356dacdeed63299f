"""A rank's CUDA generator in a checkpoint: only its own device's state is kept, and it goes back to
the device the resuming rank owns. Tested with the stand-in GPUs of labkit.checkpoint.experiments."""
import torch

from labkit.checkpoint.experiments import fake_cuda
from labkit.checkpoint.state import rng_state, set_rng_state


def _draws(gen, n=4):
    return torch.rand(n, generator=gen).tolist()


def test_rank_5_of_an_8_gpu_box_resumes_on_a_1_gpu_box():
    with fake_cuda(devices=8, current=5) as gens:           # rank 5 on cuda:5 of an 8-GPU box
        _draws(gens[5])                                    # it has drawn (dropout) on its device
        saved = rng_state()
        assert torch.equal(saved["cuda"], gens[5].get_state())   # one state: its own device's
        want = _draws(gens[5])                             # what it would draw next
    with fake_cuda(devices=1, current=0) as gens:            # the same rank resumed on a 1-GPU box
        set_rng_state(saved)
        assert _draws(gens[0]) == want


def test_each_rank_of_one_box_gets_its_own_state_back():
    with fake_cuda(devices=2, current=1) as gens:
        saved = rng_state()
        want = _draws(gens[1])
        untouched = gens[0].get_state()
    with fake_cuda(devices=2, current=1, seed=50) as gens:
        set_rng_state(saved)
        assert _draws(gens[1]) == want and not torch.equal(gens[0].get_state(), untouched)


def test_the_old_every_device_format_and_a_cpu_resume_still_load():
    with fake_cuda(devices=8, current=0) as gens:
        state = rng_state()
        state["cuda"] = [g.get_state() for g in gens]      # as checkpoints kept it before
        want = _draws(gens[0])
    with fake_cuda(devices=1, current=0) as gens:
        set_rng_state(state)                               # the old code set devices 1..7 too: invalid ordinal
        assert _draws(gens[0]) == want
    if not torch.cuda.is_available():
        set_rng_state(state)                               # CPU machine: nothing to restore on a GPU
