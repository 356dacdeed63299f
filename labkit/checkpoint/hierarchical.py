"""Checkpoints in three tiers on real ranks: a snapshot in memory every step, a copy of it on a
rank of another node, and a file on disk written in the background.

A checkpoint on shared storage costs minutes for a large model, so it is taken rarely and every
failure throws away, on average, half an interval. Most failures do not need it: a crashed
process leaves its machine's memory intact, and a lost machine leaves the other machines'. So:

- **memory** (every step): each rank writes its whole state — weights, optimizer, schedule, every
  random generator, the data position (`labkit.checkpoint.io.save`) — to its node's memory, a
  tmpfs folder (``/dev/shm``) that outlives the process but not the machine. A snapshot copies
  the state once; CheckFreq (Mohan et al., FAST 2021) calls this the *snapshot* phase.
- **peer** (every step): the snapshot's bytes are sent over the process group to the rank that
  keeps this rank's copy, on *another node* (`peer_ranks`), which writes them into its own node's
  memory. Gemini (Wang et al., SOSP 2023) keeps checkpoints in the CPU memory of the training
  machines this way, and places the copies so that losing one machine loses no checkpoint.
- **disk** (every ``disk_every`` steps): a background thread writes the snapshot's bytes to the
  disk folder (atomically, `io.write_bytes`), while training goes on — CheckFreq's *persist*
  phase; at most one write is in flight (the next one waits for it).

"Nodes" here are groups of ``per_node`` consecutive ranks on this machine; node n's memory is the
folder ``<memory>/node<n>``, so losing a node is losing that folder.

**Recovery.** The ranks exchange which steps each tier holds for whom (``all_gather_object``), and
agree on the newest step that *every* rank can get back from some tier — a coordinated recovery
line, as in section 4 of the lab. Each rank then takes it from the nearest tier that has it: its
own memory, else the copy its peer holds (the peer sends the bytes), else the disk. Checkpoints
newer than the agreed step are deleted from every tier: that future was abandoned.

Which tier survives which failure:

    failure    example                            memory   peer copy   disk
    process    a rank's process crashes           yes      yes         yes
    node       a machine (its memory) is lost     no       yes*        yes
    job        every machine's memory is lost     no       no          yes

    * unless the copy was on the same node: hence a peer on another node.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from labkit.checkpoint import io
from labkit.checkpoint.resume import RunConfig, Trainer, seed_everything
from labkit.checks import check_int

TIERS = ("memory", "peer", "disk")
FAILURES = {"process": (), "node": ("memory",), "job": ("memory", "peer")}   # tiers each one destroys
PATTERN = re.compile(r"^step-(\d+)\.ckpt$")


def _peer_ranks(world, per_node):
    """Where each rank's in-memory checkpoint copy is kept, for hierarchical checkpoints.

    world ranks sit on world // per_node nodes of per_node consecutive ranks (node of rank r:
    r // per_node); world is a multiple of per_node with at least 2 nodes. Every rank keeps its
    own snapshot in its node's memory and sends a copy to another rank, so that losing one node
    (its memory) loses no checkpoint. Return a list peers of world ints, peers[r] = the rank that
    keeps rank r's copy, such that
    - peers[r] is on a different node than r (never r itself), and
    - every rank keeps exactly one copy (peers is a permutation of 0..world-1: equal memory).
    Example: world 4, per_node 2 -> [2, 3, 0, 1] is one answer.
    """
    # BEGIN SOLUTION
    # HINT: find a rule that moves every rank off its node and is one-to-one: think of the nodes as a ring.
    return [(r + per_node) % world for r in range(world)]
    # END SOLUTION


def peer_ranks(world: int, per_node: int) -> list[int]:
    """peers[r]: the rank that keeps rank r's in-memory copy — r + per_node (mod world), the same
    place on the next node. A permutation (every rank keeps exactly one copy: equal memory), and
    never on r's own node, so that losing one node loses no checkpoint. Needs at least 2 nodes."""
    world = check_int("peer_ranks", "world", world, minimum=2, maximum=1 << 20)
    per_node = check_int("peer_ranks", "per_node", per_node, minimum=1)
    if world % per_node or world // per_node < 2:
        raise ValueError(f"peer_ranks: world ({world}) must be a multiple (>= 2 nodes) of per_node ({per_node})")
    return _peer_ranks(world, per_node)


def check_peers(peers, world: int, per_node: int) -> list[int]:
    """``peers`` as a list of ints, or ValueError naming the problem: not one per rank, not a
    permutation (some rank would keep two copies, another none), or a copy on its own node."""
    peers = [check_int("check_peers", "peers[r]", p, minimum=0, maximum=world - 1) for p in peers]
    if len(peers) != world:
        raise ValueError(f"check_peers: {len(peers)} peers for {world} ranks")
    if sorted(peers) != list(range(world)):
        raise ValueError(f"check_peers: peers {peers} is not a permutation: some rank keeps two copies")
    same = [r for r, p in enumerate(peers) if p // per_node == r // per_node]
    if same:
        r = same[0]
        where = " keeps its own copy" if peers[r] == r else f"'s copy is on its own node (rank {peers[r]})"
        raise ValueError(f"check_peers: rank {r}{where}")
    return peers


def lost_on_node_failure(peers, per_node: int, node: int) -> list[int]:
    """Ranks whose in-memory checkpoint is gone when ``node`` is lost: both their own snapshot and
    their copy were there (only their disk checkpoint is left)."""
    world = len(peers)
    on = set(range(node * per_node, (node + 1) * per_node))
    return [r for r in range(world) if r in on and peers[r] in on]


def memory_root() -> Path:
    """Where "node memory" lives: /dev/shm (a tmpfs: RAM, survives the process, not the machine)
    when there is one, else the temporary folder."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


@dataclass(frozen=True)
class Layout:
    """Where rank r's tiers are: ``memory``/node<n>/rank<r> (own snapshots), ``memory``/node<m>/
    copy-of-rank<r> on its peer's node m, ``disk``/rank<r>. ``peers`` as `peer_ranks` returns."""

    world: int
    per_node: int
    memory: str
    disk: str
    peers: tuple

    def node_of(self, rank: int) -> int:
        return rank // self.per_node

    def own(self, rank: int) -> Path:
        return Path(self.memory, f"node{self.node_of(rank)}", f"rank{rank}")

    def copy(self, owner: int) -> Path:
        """The folder that holds ``owner``'s copy, on its peer's node."""
        return Path(self.memory, f"node{self.node_of(self.peers[owner])}", f"copy-of-rank{owner}")

    def on_disk(self, rank: int) -> Path:
        return Path(self.disk, f"rank{rank}")

    def node_folder(self, node: int) -> Path:
        return Path(self.memory, f"node{node}")


def make_layout(world: int, per_node: int, folder, peers=None) -> Layout:
    """A layout with its memory tier in a fresh folder under `memory_root` and its disk tier in
    ``folder``/disk; ``peers`` checked (default `peer_ranks`)."""
    peers = check_peers(peer_ranks(world, per_node) if peers is None else peers, world, per_node)
    memory = tempfile.mkdtemp(prefix="labkit-node-memory-", dir=memory_root())
    return Layout(world, per_node, memory, str(Path(folder, "disk")), tuple(peers))


def steps_in(folder: Path) -> list[int]:
    """Steps of the checkpoints in ``folder``, newest first ([] if there is no folder)."""
    if not folder.is_dir():
        return []
    return sorted((int(m.group(1)) for p in folder.iterdir() if (m := PATTERN.match(p.name))), reverse=True)


def _path(folder: Path, step: int) -> Path:
    return folder / f"step-{step:08d}.ckpt"


def _keep_newest(folder: Path, keep: int) -> None:
    for step in steps_in(folder)[keep:]:
        _path(folder, step).unlink(missing_ok=True)


def _drop_newer(folder: Path, step: int) -> None:
    for s in steps_in(folder):
        if s > step:
            _path(folder, s).unlink(missing_ok=True)


def _exchange(data: bytes, to: int, frm: int) -> bytes:
    """Send ``data`` to rank ``to`` while receiving from rank ``frm`` (lengths first)."""
    size, got = torch.tensor([len(data)], dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
    reqs = [dist.isend(size, to), dist.irecv(got, frm)]
    for r in reqs:
        r.wait()
    out = torch.empty(int(got), dtype=torch.uint8)
    reqs = [dist.isend(torch.frombuffer(bytearray(data), dtype=torch.uint8), to), dist.irecv(out, frm)]
    for r in reqs:
        r.wait()
    return out.numpy().tobytes()


class _Persist:
    """CheckFreq's background write: one thread at a time writes snapshot bytes to disk."""

    def __init__(self, folder: Path, keep: int):
        self.folder, self.keep, self.thread, self.seconds = folder, keep, None, []
        folder.mkdir(parents=True, exist_ok=True)

    def start(self, step: int, data: bytes) -> float:
        """Wait for the previous write, start this one; returns the seconds spent waiting."""
        t0 = time.perf_counter()
        self.wait()
        waited = time.perf_counter() - t0

        def write():
            t = time.perf_counter()
            io.write_bytes(_path(self.folder, step), data)
            _keep_newest(self.folder, self.keep)
            self.seconds.append(time.perf_counter() - t)

        self.thread = threading.Thread(target=write, name=f"persist-step-{step}", daemon=True)
        self.thread.start()
        return waited

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None


def _snapshot(trainer: Trainer, folder: Path, step: int) -> bytes:
    """Save the whole state to ``folder`` (this node's memory) and return the file's bytes."""
    path = io.save(_path(folder, step), model=trainer.model, optimizer=trainer.optimizer,
                   scheduler=trainer.scheduler, step=step,
                   extra={"sampler": trainer.sampler.state_dict(), "losses": trainer.losses,
                          "global_losses": trainer.global_losses})
    return path.read_bytes()


def _restore(trainer: Trainer, path: Path) -> int:
    step, extra = io.load(path, model=trainer.model, optimizer=trainer.optimizer, scheduler=trainer.scheduler)
    trainer.sampler.load_state_dict(extra["sampler"])
    trainer.losses, trainer.global_losses = list(extra["losses"]), list(extra["global_losses"])
    return step


def recover(trainer: Trainer, layout: Layout, rank: int) -> dict:
    """Agree on the newest step every rank can get back, and load it from the nearest tier
    (module docstring). Returns {"step", "tier", "seconds"} (0, "none" if nothing is left)."""
    t0 = time.perf_counter()
    world, peers = layout.world, layout.peers
    owner_of_mine = peers.index(rank)                       # whose copy this rank keeps
    have = (steps_in(layout.own(rank)), steps_in(layout.copy(owner_of_mine)), steps_in(layout.on_disk(rank)))
    everyone = [None] * world
    dist.all_gather_object(everyone, have)
    reachable = []
    for r in range(world):
        keeper = peers[r]
        reachable.append(set(everyone[r][0]) | set(everyone[keeper][1]) | set(everyone[r][2]))
    common = set.intersection(*reachable)
    step = max(common) if common else 0
    if step == 0:
        return {"step": 0, "tier": "none", "seconds": time.perf_counter() - t0}

    def tier_of(r):
        if step in everyone[r][0]:
            return "memory"
        return "peer" if step in everyone[peers[r]][1] else "disk"

    tiers = [tier_of(r) for r in range(world)]
    # the copies travel back, the keeper of rank r's copy sending it to r (non-blocking both ways:
    # a rank may have to send one copy and receive its own)
    send = _path(layout.copy(owner_of_mine), step).read_bytes() if tiers[owner_of_mine] == "peer" else None
    receive = tiers[rank] == "peer"
    size_out, size_in = torch.tensor([len(send or b"")], dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
    reqs = ([dist.isend(size_out, owner_of_mine)] if send is not None else []) + (
        [dist.irecv(size_in, peers[rank])] if receive else [])
    for r in reqs:
        r.wait()
    buf = torch.empty(int(size_in), dtype=torch.uint8)
    reqs = ([dist.isend(torch.frombuffer(bytearray(send), dtype=torch.uint8), owner_of_mine)] if send is not None
            else []) + ([dist.irecv(buf, peers[rank])] if receive else [])
    for r in reqs:
        r.wait()
    mine = tiers[rank]
    if mine == "peer":
        layout.own(rank).mkdir(parents=True, exist_ok=True)
        path = io.write_bytes(_path(layout.own(rank), step), buf.numpy().tobytes())
    else:
        path = _path(layout.own(rank) if mine == "memory" else layout.on_disk(rank), step)
    got = _restore(trainer, path)
    for folder in (layout.own(rank), layout.copy(owner_of_mine), layout.on_disk(rank)):
        _drop_newer(folder, step)                            # the abandoned future, in every tier
    dist.barrier()
    return {"step": got, "tier": mine, "seconds": time.perf_counter() - t0}


def train_tiered(rank: int, world: int, run: RunConfig, steps: int, layout: Layout, disk_every: int = 4,
                 resume: bool = False, fault: tuple | None = None) -> dict:
    """`labkit.checkpoint.resume.train`'s training with the three tiers (run it on every rank,
    ``world`` >= 2 of them, under `labkit.dist.launch`). ``fault`` = (rank, step): that rank kills
    itself right after that step, before its snapshot. Returns {"step", "params", "optimizer",
    "losses", "global_losses", "resumed_from", "recovery" (`recover`'s dict or None),
    "stall_s" (seconds per step spent on the memory snapshot and the peer copy), "persist_s"
    (seconds each background disk write took), "persist_wait_s" (seconds training waited for them)}."""
    check_int("train_tiered", "steps", steps, minimum=1)
    check_int("train_tiered", "disk_every", disk_every, minimum=1)
    if layout.world != world:
        raise ValueError(f"train_tiered: the layout is for {layout.world} ranks, not {world}")
    seed_everything(run.seed * 1000 + rank)
    trainer = Trainer(run, rank, world)
    own, peer, owner = layout.own(rank), layout.peers[rank], layout.peers.index(rank)
    own.mkdir(parents=True, exist_ok=True)
    layout.copy(owner).mkdir(parents=True, exist_ok=True)
    persist = _Persist(layout.on_disk(rank), keep=2)
    recovery = recover(trainer, layout, rank) if resume else None
    start = recovery["step"] if recovery else 0
    stall, waited = [], 0.0
    for step in range(start + 1, steps + 1):
        trainer.step()
        if fault is not None and fault == (rank, step):
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.perf_counter()
        data = _snapshot(trainer, own, step)
        held = _exchange(data, peer, owner)
        io.write_bytes(_path(layout.copy(owner), step), held)
        _keep_newest(own, 2)
        _keep_newest(layout.copy(owner), 2)
        stall.append(time.perf_counter() - t0)
        if step % disk_every == 0:
            waited += persist.start(step, data)
    persist.wait()
    return {"step": steps, "params": {n: p.detach().clone() for n, p in trainer.model.named_parameters()},
            "optimizer": trainer.optimizer.state_dict(), "losses": trainer.losses,
            "global_losses": trainer.global_losses, "resumed_from": start, "recovery": recovery,
            "stall_s": stall, "persist_s": persist.seconds, "persist_wait_s": waited}


def lose(layout: Layout, failure: str, rank: int) -> list[str]:
    """What ``failure`` of ``rank`` destroys besides the process: "process" nothing, "node" the
    memory of rank's node (its ranks' snapshots and the copies it kept), "job" every node's memory.
    Returns the folders removed."""
    if failure not in FAILURES:
        raise ValueError(f"lose: failure must be one of {', '.join(FAILURES)}, got {failure!r}")
    if failure == "process":
        return []
    nodes = [layout.node_of(rank)] if failure == "node" else range(layout.world // layout.per_node)
    gone = []
    for n in nodes:
        folder = layout.node_folder(n)
        if folder.exists():
            shutil.rmtree(folder)
            gone.append(folder.name)
    return gone


def remove(layout: Layout) -> None:
    """Free the layout's memory tier (the disk folder is the caller's)."""
    shutil.rmtree(layout.memory, ignore_errors=True)


def recovery_tiers(peers, per_node: int, failure: str, node: int = 0) -> list[str]:
    """The tier each rank recovers from after ``failure`` on ``node`` (pure; the same rule as
    `recover` when every tier holds the same step): "memory" if its node's memory survived, else
    "peer" if its copy's node did, else "disk"."""
    if failure not in FAILURES:
        raise ValueError(f"recovery_tiers: failure must be one of {', '.join(FAILURES)}, got {failure!r}")
    world = len(peers)
    nodes = world // per_node
    node = check_int("recovery_tiers", "node", node, minimum=0, maximum=nodes - 1)
    lost = set() if failure == "process" else ({node} if failure == "node" else set(range(nodes)))
    return ["memory" if r // per_node not in lost else "peer" if peers[r] // per_node not in lost else "disk"
            for r in range(world)]
