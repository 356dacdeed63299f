"""Sharded checkpoints with DCP: bytes per rank, save/load bandwidth against the disk, async_save.

For 2 and 4 gloo ranks, our FSDP (float32, AdamW, stepped twice so Adam's state exists) around a
seeded `labkit.model.GPT` of tens of MB of state is checkpointed with
`labkit.checkpoint.distributed` (``torch.distributed.checkpoint`` underneath):

- bytes: each rank's data file next to Lab 10's stage-3 bytes with no gradients, 12·ΣΨ'/N
  (4 bytes of parameter + 8 of Adam's m and v per element), less the rank's padding, plus what
  rank 0 writes once for all (whole 1-D groups, step counters, layout) and torch.save framing;
- bandwidth: bytes of the whole checkpoint / seconds of a blocking save (barrier to barrier) and
  of a load (files evicted from the page cache first), next to a dd-style baseline measured in
  the same run on the same file system: the same bytes written with os.write + fsync, evicted,
  read back with os.read;
- async_save: T_block, the time the call holds the training loop (it stages a copy), against
  T_s, a blocking save: hidden fraction 1 − T_block/T_s; and the step time while it writes.

    .venv/bin/python benchmarks/checkpoint.py [--quick]

Writes benchmarks/results/checkpoint.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.bench import write_results  # noqa: E402
from labkit.checkpoint.dcp_measure import measure_checkpoint  # noqa: E402
from labkit.model import GPTConfig, parameter_count  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a ~6 MB checkpoint instead of ~45 MB")
    a = ap.parse_args(argv)
    cfg = GPTConfig(layers=2, hidden=128, heads=4, seq_len=32, vocab=512) if a.quick else \
        GPTConfig(layers=4, hidden=256, heads=4, seq_len=64, vocab=1024)
    repeat = 3
    rows, byte_lines = [], []
    for world in (2, 4):
        m = measure_checkpoint(world, cfg, repeat=repeat, steps_during=2, timeout=600)
        bw, r0 = m.bandwidth(), m.ranks[0]
        rows.append([world, m.total_bytes / 1e6, round(bw["disk write"] / 1e6), round(bw["save"] / 1e6),
                     bw["save"] / bw["disk write"], round(bw["disk read"] / 1e6), round(bw["load"] / 1e6),
                     bw["load"] / bw["disk read"], r0["save_s"], r0["block_s"], m.hidden_fraction,
                     r0["step_s"], r0["step_during_s"], r0["wait_s"]])
        print(m.table(), m.bytes_table(), sep="\n", flush=True)
        for rank, d in enumerate(m.ranks):
            byte_lines.append(f"| {world} | {rank} | {d['bytes']:,} | {d['payload']:,} | {d['formula']:,.0f} | "
                              f"{12 * d['padding']} | {d['payload'] - d['formula'] + 12 * d['padding']:,.0f} | "
                              f"{d['items']} | {(d['bytes'] - d['payload']) / d['items']:.0f} |")
    psi = parameter_count(cfg)
    notes = (
        f"Model: labkit.model.GPT {cfg}, {psi:,} parameters, float32, AdamW, our FSDP (1-D parameters whole); "
        f"medians of {repeat}, rank 0's clock, barrier to barrier. 'vs disk' = DCP's bandwidth / the baseline's "
        "(same bytes, same file system, same run). A load reads the files after they were evicted from the page "
        "cache (posix_fadvise DONTNEED), as does the baseline's read. DCP's extra time goes to its plans (a gather "
        "and a scatter of them over gloo), one torch.save archive per tensor, fsync of every file, and .metadata "
        "written by rank 0 after the others finish; a load reads .metadata and the layout before the tensors. "
        "T_block: the async_save call (a copy of the state into fresh memory); the thread then writes while the "
        "next 2 steps run ('step during' vs 'step'; on 2 shared cores the writer competes with training); "
        "'wait' is what was left to wait for after those steps.\n\n"
        "Bytes per rank (data file of the blocking save): 'Lab 10' = model_state_bytes(ΣΨ', N, stage 3, p=4, "
        "g=0, k=8) = 12·ΣΨ'/N; 'tensors' = the rank's tensor bytes = Lab 10 − 12·padding + 'replicated' "
        "(rank 0 only: whole 1-D groups with their m and v, 4-byte step counters); framing = torch.save's "
        "archive around each tensor, and on rank 0 also 3 pickled objects (layout, hyper-parameters, extra) "
        "counted there; tests/test_checkpoint_distributed.py checks all of it to the byte, with sizes that leave "
        "padding (at these sizes every group divides by 2 and 4: no padding).\n\n"
        "| ranks | rank | file B | tensors B | Lab 10 B | padding B | replicated B | items | framing B/item |\n"
        "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(byte_lines))
    path = write_results(
        "checkpoint", "Distributed checkpoints (DCP) of our FSDP: bytes per rank, bandwidth vs the disk, async_save",
        ["ranks", "MB", "disk write MB/s", "save MB/s", "save/disk", "disk read MB/s", "load MB/s",
         "load/disk", "T_s s", "T_block s", "hidden", "step s", "step during s", "wait s"], rows, notes,
        ran_on="cpu (gloo ranks)")
    print(path.read_text())


if __name__ == "__main__":
    main()
