"""The same fault-tolerant training, launched by PyTorch's own elastic agent, torchrun.

    torchrun --standalone --nproc-per-node 4 --max-restarts 3 \\
        -m labkit.checkpoint.elastic --folder ckpt --steps 12 --out final.pt [--fail 2 7]

torchrun starts one worker process per rank with the rendezvous in its environment (RANK,
WORLD_SIZE, MASTER_ADDR, ...); ``init_process_group`` reads it. When a worker dies, the agent
stops the others and starts them all again, up to ``--max-restarts`` times, telling each attempt
its number. Our script needs nothing more than Lab 12's resume:
every attempt starts from the newest good checkpoint in ``--folder``. ``--fail R S`` kills rank R
with SIGKILL after step S in the first attempt only, as a crashed node would. Rank 0 writes the
result (`train`'s: parameters, optimizer state, losses) and its attempt to ``--out``.

On a cluster, give torchrun ``--nnodes``, ``--node-rank``, ``--rdzv-backend c10d`` and
``--rdzv-endpoint`` instead of ``--standalone``; nothing in the script changes (README's "More
than one machine"). Gloo picks its network interface from the host name; set GLOO_SOCKET_IFNAME
to choose one ("lo" for several agents on one machine, as the tests run it).
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist

from labkit.checkpoint.resume import RunConfig, train
from labkit.dist import init_torchrun_group


def init_process_group() -> int:
    """gloo's process group for this attempt; returns the attempt's number (0 for the first).

    The agent's store (TORCHELASTIC_USE_AGENT_STORE) outlives restarts at the same address, and the
    keys an attempt's ranks publish there would be read again by the next attempt's ranks, which
    then try to connect to the dead ones (seen with torch 2.13; cf. pytorch/pytorch#167288). A
    prefix per attempt keeps each attempt's keys apart. The attempt is counted in that store, not
    read from TORCHELASTIC_RESTART_COUNT: each machine's agent keeps its own count, and an agent
    whose workers were restarted because another machine's died does not count that restart, so
    on two machines the counts differ and the ranks would never meet."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        init_torchrun_group("gloo")
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                          timeout=datetime.timedelta(seconds=60))
    attempt = (store.add("labkit/workers-started", 1) - 1) // world   # every worker of every attempt adds 1
    init_torchrun_group("gloo", store=dist.PrefixStore(f"labkit/attempt-{attempt}", store), rank=rank,
                        world_size=world)
    return attempt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.checkpoint.elastic", description=__doc__.splitlines()[0])
    ap.add_argument("--folder", required=True, help="checkpoint folder (shared by all attempts)")
    ap.add_argument("--steps", type=int, default=12, help="training steps in all")
    ap.add_argument("--out", required=True, help="where rank 0 writes its result (torch.save)")
    ap.add_argument("--fail", type=int, nargs=2, metavar=("RANK", "STEP"), default=None,
                    help="kill RANK after STEP in the first attempt")
    a = ap.parse_args(argv)
    if "RANK" not in os.environ:
        print("elastic: run me under torchrun (see the module docstring)", file=sys.stderr)
        return 2
    attempt = init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    fault = tuple(a.fail) if a.fail and attempt == 0 else None
    result = train(rank, world, RunConfig(), a.steps, a.folder, resume=True, fault=fault)
    if rank == 0:
        torch.save({**result, "attempt": attempt}, a.out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
