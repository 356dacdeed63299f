"""Training that stops, resumes from its checkpoint in a fresh process, and ends bit for bit where
the uninterrupted run ends — on one rank, and data-parallel on several.

    launch(train, 2, RUN, 12)                                   # 12 steps, uninterrupted
    launch(train, 2, RUN, 12, folder, stop_after=5)             # 5 steps, checkpoint, exit
    launch(train, 2, RUN, 12, folder, resume=True)              # fresh processes: steps 6..12

Every kind of randomness a training loop commonly has is used here, so that forgetting any one of
them on resume shows: **dropout** (torch's generator), a random **crop** of each batch's sequence
length (Python's ``random``), random **token noise** in the inputs (NumPy's generator), and a
shuffled **data order** (`labkit.checkpoint.state.ResumableSampler`). The learning rate follows a
schedule (``LambdaLR``: linear warm-up, then exponential decay), whose position is state too.

Each rank keeps its own checkpoints in ``folder/rank<r>`` (`labkit.checkpoint.io.
CheckpointManager`, the last two): the weights and the optimizer state are the same on every rank,
but each rank's random generators are its own. ``forget`` leaves states out on resume, to show
the mistakes: "rng" (no generator restored), "numpy" (NumPy's only), "sampler" (the data order
restarts), "scheduler" (the learning rate restarts its warm-up).
"""
from __future__ import annotations

import os
import random
import signal
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from labkit.checkpoint.io import CheckpointManager
from labkit.checkpoint.state import ResumableSampler, rng_state, set_rng_state
from labkit.checks import check_int
from labkit.dist import device
from labkit.model import GPT, GPTConfig, batch

FORGETTABLE = ("rng", "numpy", "sampler", "scheduler")


@dataclass(frozen=True)
class RunConfig:
    """One training run: the model, a dataset of ``dataset`` sequences, ``batch`` sequences per step
    over all ranks, AdamW at ``lr`` after ``warmup`` steps, a checkpoint every ``every`` steps."""

    cfg: GPTConfig = field(default_factory=lambda: GPTConfig(layers=2, hidden=32, heads=4, seq_len=16, vocab=64,
                                                             dropout=0.1))
    dataset: int = 48
    batch: int = 8
    lr: float = 3e-3
    warmup: int = 3
    every: int = 2
    noise: float = 0.05
    seed: int = 0


def lr_factor(run: RunConfig, step: int) -> float:
    """The schedule: linear warm-up over ``run.warmup`` steps, then 0.9 per step."""
    return (step + 1) / run.warmup if step < run.warmup else 0.9 ** (step - run.warmup + 1)


@dataclass
class Trainer:
    """The model, optimizer, schedule, data and sampler of one rank, and one step of training."""

    run: RunConfig
    rank: int
    world: int
    model: torch.nn.Module = None
    optimizer: torch.optim.Optimizer = None
    scheduler: object = None
    sampler: ResumableSampler = None
    data: tuple = None
    ddp: object = None
    losses: list = field(default_factory=list)          # this rank's loss (its slice of the batch)
    global_losses: list = field(default_factory=list)   # the whole batch's: the mean over the ranks

    def __post_init__(self):
        run = self.run
        if run.batch % self.world:
            raise ValueError(f"train: batch {run.batch} must be divisible by the {self.world} ranks")
        self.model = GPT(run.cfg, seed=0).to(device())            # this rank's GPU under NCCL
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=run.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(run, s))
        self.sampler = ResumableSampler(run.dataset, run.batch, seed=run.seed)
        self.data = batch(run.cfg, run.dataset, seed=run.seed + 100)                 # (N, T) each
        if self.world > 1:
            from labkit.data_parallel import DDP

            self.ddp = DDP(self.model)

    def step(self) -> float:
        """One optimizer step on this rank's slice of the next global batch; returns its loss."""
        run, cfg = self.run, self.run.cfg
        idx = self.sampler.next_batch()                                            # (batch,)
        per = run.batch // self.world
        idx = idx[self.rank * per:(self.rank + 1) * per]
        crop = random.randint(cfg.seq_len // 2, cfg.seq_len)                       # Python's generator
        tokens, targets = self.data[0][idx, :crop].clone(), self.data[1][idx, :crop]
        noisy = np.random.random_sample(tuple(tokens.shape)) < run.noise           # NumPy's generator
        tokens[torch.from_numpy(noisy)] = torch.from_numpy(
            np.random.randint(cfg.vocab, size=int(noisy.sum()))).to(tokens.dtype)
        tokens, targets = tokens.to(device()), targets.to(device())
        self.optimizer.zero_grad(set_to_none=True)
        _, loss = (self.ddp or self.model)(tokens, targets)                        # dropout: torch's
        loss.backward()
        if self.ddp is not None:
            self.ddp.finish_gradient_synchronization()
        self.optimizer.step()
        self.scheduler.step()
        self.losses.append(loss.item())
        mean = loss.detach().clone()                      # equal slices: the global loss is the mean
        if self.world > 1:
            dist.all_reduce(mean)
            mean /= self.world
        self.global_losses.append(mean.item())
        return self.losses[-1]

    def save(self, manager: CheckpointManager, step: int) -> None:
        manager.save(step, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                     extra={"sampler": self.sampler.state_dict(), "losses": self.losses,
                            "global_losses": self.global_losses})

    def restore(self, manager: CheckpointManager, forget=()) -> int:
        """Load this rank's newest good checkpoint; the step to go on from (0 if there is none)."""
        bad = set(forget) - set(FORGETTABLE)
        if bad:
            raise ValueError(f"train: forget takes {', '.join(FORGETTABLE)}, got {sorted(bad)}")
        before = rng_state()
        step = agreed_step(manager)
        if step == 0:
            return 0
        extra = manager.rollback(step, model=self.model, optimizer=self.optimizer,   # newer ones: aside
                                 scheduler=None if "scheduler" in forget else self.scheduler)[1]
        if "scheduler" not in forget:       # this run's base learning rate wins (a resize may change it)
            self.scheduler.base_lrs = [self.run.lr] * len(self.optimizer.param_groups)
            for group in self.optimizer.param_groups:
                group["lr"] = self.run.lr * lr_factor(self.run, self.scheduler.last_epoch)
        if "rng" in forget:
            set_rng_state(before)
        elif "numpy" in forget:
            np.random.set_state(_numpy(before))
        if "sampler" not in forget:
            self.sampler.load_state_dict(extra["sampler"])
        self.losses, self.global_losses = list(extra["losses"]), list(extra.get("global_losses", []))
        return step


def agreed_step(manager: CheckpointManager) -> int:
    """The newest step every rank has a good checkpoint of (0: none). Ranks checkpoint together,
    but a rank that dies may have written one checkpoint fewer than the others: resuming each rank
    from its own newest would put the ranks at different steps, and the first collective would
    hang. So the ranks agree (an all-reduce of their newest good steps, MIN) — a coordinated
    recovery line."""
    good = manager.good_steps()
    newest = torch.tensor([good[0] if good else 0])
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(newest, op=dist.ReduceOp.MIN)
    step = int(newest)
    if step and step not in good:
        raise RuntimeError(f"train: rank {dist.get_rank()} has no good checkpoint of step {step}, "
                           f"which every other rank has (its good steps: {good}); keep more")
    return step


def _numpy(state: dict):
    n = state["numpy"]
    return n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's generators (and CUDA's, through torch) from one seed."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(rank: int, world: int, run: RunConfig, steps: int, folder=None, resume: bool = False,
          stop_after: int | None = None, fault: tuple | None = None, forget=()) -> dict:
    """Train ``steps`` steps in all (run it on every rank, e.g. under `labkit.dist.launch`).

    folder: where rank r keeps its checkpoints (``folder/rank<r>``); None: no checkpoints.
    resume: start from the newest good checkpoint there (from scratch if there is none).
    stop_after: save and return after this step (an orderly stop).
    fault: (rank, step): that rank kills itself (SIGKILL) right after that step — a crash.
    forget: states not restored on resume (module docstring).
    Returns {"step", "params": {name: tensor}, "optimizer": state dict, "losses" (this rank's),
    "global_losses" (the whole batch's), "resumed_from"}; the losses of steps up to
    ``resumed_from`` come from the checkpoint, the others were computed by this process.
    """
    check_int("train", "steps", steps, minimum=1)
    if device().type == "cuda":          # bit for bit on a GPU needs deterministic kernels (and cuBLAS's)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    seed_everything(run.seed * 1000 + rank)
    trainer = Trainer(run, rank, world)
    manager = CheckpointManager(Path(folder) / f"rank{rank}", keep=2) if folder is not None else None
    start = step = trainer.restore(manager, forget) if resume and manager is not None else 0
    for step in range(start + 1, steps + 1):
        trainer.step()
        if fault is not None and fault == (rank, step):
            os.kill(os.getpid(), signal.SIGKILL)
        if manager is not None and (step % run.every == 0 or step == stop_after):
            trainer.save(manager, step)
        if step == stop_after:
            break
    return {"step": step, "params": {n: p.detach().clone() for n, p in trainer.model.named_parameters()},
            "optimizer": trainer.optimizer.state_dict(), "losses": trainer.losses,
            "global_losses": trainer.global_losses, "resumed_from": start}
