"""Everything besides the weights that an exact resume needs: random-number generators and data order.

A run resumed from a checkpoint repeats the uninterrupted run bit for bit only if every source of
randomness and order continues where it stopped:

- the **random-number generators**: Python's ``random``, NumPy's global generator, torch's CPU
  generator (dropout, ``torch.randn``) and the CUDA generator of the rank's own GPU (dropout on a
  GPU) — `rng_state`, `set_rng_state`. One rank draws on its own device only, so only that state
  is kept, and it goes back to whichever device the resuming rank owns: a checkpoint written by
  rank 5 of an 8-GPU box (cuda:5) resumes on a 1-GPU box (cuda:0);
- the **data order**: which epoch, which permutation, how far into it — `ResumableSampler`, whose
  permutation is drawn from its own generator seeded by (seed, epoch), so that it depends on
  nothing else, and whose ``state_dict()`` is two integers.

Forgetting any one of them is the classic mistake: the resumed run looks fine, trains, and
differs from the uninterrupted one from the first step after the resume.
"""
from __future__ import annotations

import random

import numpy as np
import torch

from labkit.checks import check_int


# BEGIN SOLUTION (labkit's generators' state: it answers resume_state)
def rng_state() -> dict:
    """Every generator's state, as plain data (``torch.load(weights_only=True)`` can read it back)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    out = {"python": random.getstate(), "torch": torch.get_rng_state(),
           "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                     "has_gauss": int(has_gauss), "gauss": float(gauss)}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state(torch.cuda.current_device())    # this rank's GPU only
    return out
# END SOLUTION


# BEGIN SOLUTION (labkit's generators' state)
def set_rng_state(state: dict) -> None:
    """Put every generator back where `rng_state` found it."""
    random.setstate(_tuples(state["python"]))
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available():     # saved on a GPU; a CPU resume has no CUDA generator
        here = torch.cuda.current_device()
        if isinstance(cuda, (list, tuple)):                 # older checkpoints kept every device of the box
            cuda = cuda[here] if here < len(cuda) else cuda[0]
        torch.cuda.set_rng_state(cuda, here)
# END SOLUTION


def _tuples(x):
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


class ResumableSampler:
    """Batches of indices into a dataset of ``size`` items, reshuffled every epoch, resumable.

    Epoch e's order is ``torch.randperm(size)`` drawn from a generator seeded with seed·1000 + e;
    ``next_batch()`` returns the next ``batch_size`` indices (an epoch's last, short batch is
    dropped) and moves the position on. ``state_dict()`` = {"epoch", "position"}."""

    def __init__(self, size: int, batch_size: int, seed: int = 0):
        fn = "ResumableSampler"
        self.size = check_int(fn, "size", size, minimum=1)
        self.batch_size = check_int(fn, "batch_size", batch_size, minimum=1, maximum=size)
        self.seed = check_int(fn, "seed", seed, minimum=0, maximum=2 ** 53)   # seed·1000 + epoch seeds a generator
        self.epoch, self.position = 0, 0
        self._order = self._permutation()

    def _permutation(self) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed * 1000 + self.epoch)
        return torch.randperm(self.size, generator=gen)

    def next_batch(self) -> torch.Tensor:
        """(batch_size,) int64 indices."""
        if self.position + self.batch_size > self.size:
            self.epoch, self.position = self.epoch + 1, 0
            self._order = self._permutation()
        out = self._order[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation()


def equal_state(a, b) -> bool:
    """Bit-for-bit equality of nested dicts, lists and tuples of tensors and plain values (state
    dicts, optimizer states): same keys, same dtypes, same numbers (``torch.equal``)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(equal_state(x, y) for x, y in zip(a, b))
    return a == b


def resume_state(sampler, state=None):
    """Capture (``state is None``) or restore (given a state) what an exact resume needs besides
    the weights, the optimizer and the learning-rate schedule.

    sampler: the run's data sampler, with ``sampler.state_dict()`` -> dict and
        ``sampler.load_state_dict(d)`` (its epoch and position in the shuffled data).
    Capture: return a dict holding the sampler's state and the state of every random-number
    generator the training uses: Python's ``random`` (random.getstate()), NumPy's global one
    (np.random.get_state()), torch's CPU generator (torch.get_rng_state()) and, when
    torch.cuda.is_available(), every CUDA device's (torch.cuda.get_rng_state_all()). The grader
    saves the dict with torch.save and, in a fresh, differently seeded process, loads it back
    with ``torch.load(path, weights_only=False)``: NumPy's state (a tuple holding an ndarray, which
    a ``weights_only=True`` load refuses) may stay as np.random.get_state() returns it.
    Restore (``state`` given): put every generator and the sampler back as captured; return None.
    """
    # BEGIN SOLUTION
    # HINT: an exact resume replays the same random draws and the same data order: list every source
    # HINT: of randomness the training loop uses, and the sampler's position.
    if state is None:
        out = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
               "sampler": sampler.state_dict()}
        if torch.cuda.is_available():
            out["cuda"] = torch.cuda.get_rng_state_all()
        return out
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
    sampler.load_state_dict(state["sampler"])
    return None
    # END SOLUTION
