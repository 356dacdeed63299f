"""Fault tolerance (Lab 12): checkpoints that resume bit for bit, failures survived, and the rest.

    state.py         what an exact resume needs besides weights: RNG states, data order
    io.py            atomic, checksummed checkpoint files; CheckpointManager keeps the last k good
                     ones, quarantines damaged and abandoned ones, is safe for concurrent writers
    resume.py        training that stops, resumes and equals the uninterrupted run (1 rank, DDP)
    failures.py      a rank killed mid-run, a supervisor that restarts from the last checkpoint
    elastic.py       the same training under torchrun (--max-restarts), and on fewer ranks
    distributed.py   sharded checkpoints of FSDP with PyTorch's DCP: save on N ranks, load on M
    dcp_measure.py   bytes per rank, disk baseline, save/load bandwidth, async_save's hidden fraction
    experiments.py   a save killed on cue; a run handed over to a fresh process (pictures, grader)
    lab.py           the notebook's one-liners and check-your-work pictures
    interval.py      Young/Daly checkpoint intervals and a Monte Carlo job simulator
    abft.py          algorithm-based fault tolerance for matmul (Huang–Abraham checksums):
                     locate and correct one error; FLOP overhead (2n+1)/n²
    voting.py        replication with majority voting: TMR is 3R² − 2R³, not 1 − (1 − R)^N
    domino.py        coordinated vs independent checkpoints: recovery lines, the domino effect
    hierarchical.py  checkpoints in three tiers on real ranks: memory, a peer on another node, disk
                     in the background; recovery from the nearest tier by failure kind
    multilevel.py    multi-level checkpointing simulated (expected wall time), selective replication
    replicated_ps.py a parameter server with a backup that takes over when the primary dies
"""
from labkit.checkpoint.interval import daly_interval, young_interval
from labkit.checkpoint.io import CheckpointError, CheckpointManager, CheckpointMismatch, load, read, save

__all__ = ["save", "load", "read", "CheckpointManager", "CheckpointError", "CheckpointMismatch", "young_interval",
           "daly_interval"]
