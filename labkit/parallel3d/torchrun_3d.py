"""3D-parallel training under PyTorch's launcher, for machines beyond this one.

    torchrun --standalone --nproc-per-node 8 -m labkit.parallel3d.torchrun_3d --dp 2 --tp 2 --pp 2

torchrun starts one process per rank with the rendezvous in its environment (RANK, WORLD_SIZE,
MASTER_ADDR, ...); `labkit.dist.init_torchrun_group` reads it (NCCL when each of a machine's ranks
has a GPU, else gloo), and every rank runs the same `train.train_on_rank` that `labkit.dist.launch`
runs in the notebook. On several machines give torchrun ``--nnodes N --node-rank K
--rdzv-backend c10d --rdzv-endpoint HOST:PORT`` instead of ``--standalone`` (keep tp within a
machine: the rank order puts a tp group on consecutive ranks); README's "More than one machine"
has the recipe, with Slurm. Gloo picks its network interface from the host name: set
GLOO_SOCKET_IFNAME to choose one ("lo" for several agents on one machine).

At the end rank 0 gathers every rank's shard, rebuilds the full model, trains the same model in
one process on the whole batch, and prints the largest parameter difference, the bytes per
dimension (counted and closed form) and ``torchrun_3d: OK`` — or exits with status 1.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist

from labkit.dist import init_torchrun_group
from labkit.model import GPTConfig
from labkit.parallel3d.comm_bytes import bytes_per_step
from labkit.parallel3d.train import (OPTIMIZERS, SCHEDULES, TrainSetup, assemble, check_setup, max_abs_diff,
                                     reference_training, train_on_rank)

TOLERANCE = 1e-9   # float64: expect ~1e-15; a wrong step is off by far more


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m labkit.parallel3d.torchrun_3d", description=__doc__.splitlines()[0])
    for name in ("dp", "tp", "pp"):
        ap.add_argument(f"--{name}", type=int, default=1, help=f"{name} size (default 1)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--global-batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--micro-batches", type=int, default=4, help="micro-batches per replica")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--schedule", choices=SCHEDULES, default="1f1b")
    ap.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd")
    ap.add_argument("--lr", type=float, default=0.1)
    return ap


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("torchrun_3d: run me under torchrun (see the module docstring)", file=sys.stderr)
        return 2
    cfg = GPTConfig(layers=a.layers, hidden=a.hidden, heads=a.heads, seq_len=a.seq_len, vocab=a.vocab)
    setup = TrainSetup(a.dp, a.tp, a.pp, a.global_batch, a.micro_batches, steps=a.steps, schedule=a.schedule,
                       optimizer=a.optimizer, lr=a.lr)
    try:
        check_setup("torchrun_3d", cfg, setup, int(os.environ["WORLD_SIZE"]))
    except (TypeError, ValueError) as e:
        print(e, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    backend = init_torchrun_group()
    rank = dist.get_rank()
    result = train_on_rank(cfg, setup)
    gathered = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(result, gathered, dst=0)
    ok = True
    if rank == 0:
        run = assemble(cfg, setup, gathered)
        ref, ref_losses = reference_training(cfg, setup)
        diff = max_abs_diff(run.params, ref)
        ok = diff <= TOLERANCE and run.replica_spread == 0.0
        print(f"torchrun_3d: dp={a.dp} tp={a.tp} pp={a.pp} on {dist.get_world_size()} ranks ({backend}), "
              f"{a.steps} steps of {a.schedule}, {a.optimizer}")
        print("torchrun_3d: losses " + " ".join(f"{x:.6f}" for x in run.losses))
        print(f"torchrun_3d: max |param - one-process param| = {diff:.3e}")
        formula = bytes_per_step(cfg, a.dp, a.tp, a.pp, a.global_batch, a.micro_batches, 8)
        for dim, counted in run.total_bytes.items():
            print(f"torchrun_3d: {dim:9s} bytes/step counted {counted:12.0f}  formula {formula[dim]:12.0f}")
            ok = ok and counted == formula[dim]
        print("torchrun_3d: OK" if ok else "torchrun_3d: FAILED")
        sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
