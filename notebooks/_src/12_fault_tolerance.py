# Source of notebooks/12_fault_tolerance.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 12 — Fault tolerance: checkpoints that resume exactly, and failures survived
#
# A training run on thousands of devices fails — a GPU falls off the bus, a node reboots, a link
# flaps — every few hours. It survives by saving its state regularly and starting again from the
# last save. This lab builds that from the bottom: a checkpoint file that no crash can damage, a
# resume that repeats the uninterrupted run bit for bit, a supervisor that restarts a job when a
# rank dies (and PyTorch's torchrun doing the same), sharded checkpoints that load on a different
# number of ranks, and the arithmetic of how often to save. Then fault tolerance without
# checkpoints: checksums inside a matrix product, and voting.
#
# **You will be able to**
# 1. compute a cluster's mean time between failures from its devices', and the checkpoint interval
#    that wastes least (Young, Daly) — and check it against a simulation;
# 2. write a checkpoint atomically, and detect one that is damaged;
# 3. list every state a bit-identical resume needs, and show what breaks without each;
# 4. survive a killed rank with a restart from the last checkpoint — your own supervisor, and
#    torchrun — and keep going on fewer ranks;
# 5. save a sharded model from N ranks and load it on M;
# 6. correct an error inside a matmul from its checksums, and compute the reliability of voting;
# 7. keep checkpoints in memory, on a peer and on disk, recover from each kind of failure from the
#    nearest one, and decide what to replicate.
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import torch

import labkit
from labkit.checkpoint import abft, dcp_measure, domino, interval, io, lab, voting
from labkit.claims import claim, claim_between, claim_close
from labkit.grading.check import check_your_work
from labkit.show import show

print("labkit", labkit.__version__, "| torch", torch.__version__.split("+")[0])

# %% [markdown]
# ## 1. How often things fail
#
# If each of N devices fails independently, on average once every M_dev seconds, the first failure
# among them comes N times as often: the job's mean time between failures is M = M_dev / N.
#
# **Predict first:** 10 000 GPUs, each failing once in five years. How long does the job run, on
# average, between failures?

# %%
M = interval.system_mtbf(5 * 365 * 86400, 10_000)
print(f"system MTBF: {M:.0f} s = {M / 3600:.2f} h")
claim("under four and a half hours", M < 4.5 * 3600, f"{M / 3600:.2f} h")
claim("a 30-day run fails over a hundred times", 30 * 86400 / M > 100, f"{30 * 86400 / M:.0f} failures expected")

# %% [markdown]
# Under four and a half hours. A month-long run will fail over a hundred times: whatever is not
# saved is lost each time.
#
# ## 2. A checkpoint file that no crash can damage
#
# A checkpoint is a file like any other, and a crash can strike while it is being written.
# **A common mistake** writes it in place — open the checkpoint's name and write. A crash half way
# leaves a torn file *and no good checkpoint at all*. The safe way: write a temporary file in the
# same folder, flush and `fsync` it, `os.replace` it onto the name (a rename is atomic), then
# `fsync` the folder so the rename itself survives a power cut.
#
# Here three ways are killed at four moments — before the first byte, half way, after the last
# byte, just before the rename (the child process that saves is killed on cue) — and then left
# to finish, while we watch which `fsync` calls it makes:
#
# **Predict first:** for each, what is left at the checkpoint's name? Does the version without
# any `fsync` ever lose?

# %%
crash = lab.crash_table()
print(crash)
row = {r[0]: dict(zip(crash.columns, r)) for r in crash.rows}
kills = ("start", "half", "end", "rename")
claim("in place leaves a torn file when killed at the start or half way",
      [row["in place"][k] for k in ("start", "half")] == ["torn", "torn"], "no good checkpoint at all")
for name in ("temp + rename, no fsync", "temp + fsync + rename"):
    found = [row[name][k] for k in kills]
    claim(f"{name}: the old checkpoint, whole, after every kill", found == ["old"] * 4, " ".join(found))
claim("only the last fsyncs the file before the rename, the folder after",
      [row[n]["fsync file"] + row[n]["fsync folder"] for n in row] == ["NONO", "NONO", "yesyes"],
      "seen in the child")

# %% [markdown]
# In place: a torn file when killed mid-write. Temp + rename: the old checkpoint, whole, every time
# (or the new one, once the rename has happened) — **with or without `fsync`**. A kill is not a
# power loss: what a killed process has written sits in the kernel's page cache, which outlives
# the process, and reaches the disk anyway. What a power cut (or a kernel crash) loses is what was
# not yet on the disk: a rename that reached the disk before the data it points to leaves an empty
# or partial file under the checkpoint's name — the torn file the rename was meant to prevent —
# and a rename not yet durable leaves the old name. Killing processes cannot show this, so the
# table's last two columns watch the calls themselves: the file must be fsync-ed with all its
# bytes before the rename, the folder after it. Exercise 1's grader watches the same.
#
# labkit's checkpoint file adds a header with the payload's length and SHA-256, so a file damaged
# later — a flipped bit on the disk, a truncated copy — is refused with one line instead of
# loading garbage, and `CheckpointManager` falls back to the previous one. The damaged file is
# not deleted — it may be the only copy of a long run, and a person may want to look at it — but
# moved into a `quarantine` folder, where no later rotation or resume will count it. Here one
# byte in the middle of the newest checkpoint's payload is changed:

# %%
import logging
import pathlib
import random
import tempfile
import textwrap

random.seed(0), torch.manual_seed(0)   # the saved RNG states, and so the file's size, are the same every run
folder = tempfile.mkdtemp()
model = torch.nn.Linear(4, 2)
manager = io.CheckpointManager(folder, keep=2)
for step in (10, 20):
    manager.save(step, model=model)
newest = manager.paths()[0]
before = newest.read_bytes()
header = before.index(b"\n", len(io.MAGIC)) + 1            # magic line + one JSON line
data = bytearray(before)
middle = (header + len(data)) // 2
data[middle] ^= 0xFF                                        # one byte of the payload damaged
newest.write_bytes(bytes(data))
changed = [i for i, (a, b) in enumerate(zip(before, newest.read_bytes())) if a != b]
claim("exactly one byte of the payload changed", changed == [middle] and middle >= header,
      f"byte {middle} of {len(data)}; the payload starts at byte {header}")
try:
    io.load(newest, model=model)
    refused = None
except io.CheckpointError as e:
    refused = str(e)
    print("refused:", refused.replace(folder, "<folder>"))
claim("the damaged file is refused with one line", refused is not None and "\n" not in refused,
      "checksum mismatch" if refused and "checksum" in refused else str(refused))
logging.getLogger("labkit.checkpoint").setLevel(logging.ERROR)   # its one line is printed below
step, _, path = manager.load_latest(model=model)
print(f"fell back to step {step} ({path.name})")
print(textwrap.fill(manager.quarantined[-1].replace(folder, "<folder>"), 100, subsequent_indent="  "))
claim_close("the manager falls back to step 10", step, 10)
kept = pathlib.Path(folder, "quarantine", newest.name)
claim("the damaged file is moved aside into the quarantine, not deleted",
      kept.exists() and kept.read_bytes() == bytes(data), f"{kept.name}, {kept.stat().st_size} bytes")

# %% [markdown]
# ### Exercise 1: `atomic_save`
#
# In `exercises/lab12_fault_tolerance.py`, write `atomic_save(data, path)`. The cell kills yours at
# the four moments, next to the in-place write, and shows which fsyncs yours made; the grader
# gives points for both.

# %%
check_your_work("lab12_fault_tolerance", "atomic_save")

# %% [markdown]
# ## 3. A resume that repeats the run bit for bit
#
# The weights and the optimizer's state are not enough. A training step also depends on:
#
# * the **random generators** — dropout draws from torch's (and on a GPU from each device's own),
#   data augmentation often from Python's `random` or NumPy's;
# * the **data order** — which epoch, which shuffle, how far into it;
# * the **learning-rate schedule** — how far along the warm-up or decay.
#
# Our training (`labkit.checkpoint.resume.train`) uses all of them: dropout, a random crop of each
# batch (Python), random token noise (NumPy), a shuffled sampler, a warm-up schedule. It saves them
# all, and can be told to leave one out on resume.
#
# **Predict first:** stopped after step 3 and resumed in a fresh process, on 1 and on 2 ranks, is
# the result equal to the uninterrupted run's? And with each state left out, from which step do
# the runs differ?
#
# The comparison is bit for bit, on every rank: the parameters, the optimizer's state (Adam's
# moments, its step counts, the learning rate) and the loss of each step *the resumed process
# computed itself* — the losses of steps 1–3 travel in the checkpoint and would prove nothing.

# %%
resume = lab.resume_table(worlds=(1, 2), steps=6, stop=3)
print(resume)
rows = {(r[0], r[1]): r for r in resume.rows}
for world in (1, 2):
    claim(f"{world} rank(s), everything saved: parameters, optimizer state and losses 4-6 equal",
          rows[(world, "nothing")][2:5] == ("equal",) * 3, "bit for bit")
first = {f: rows[(1, f)][5] for f in ("rng", "numpy", "sampler", "scheduler")}
claim("leaving out a generator or the data position changes step 4's loss",
      [first[f] for f in ("rng", "numpy", "sampler")] == [4, 4, 4], "rng, numpy, sampler")
claim("leaving out the schedule shows in the loss two steps later", first["scheduler"] == 6,
      f"first differing loss at step {first['scheduler']}")
claim("every left-out state also changes the parameters and the optimizer state",
      all(rows[(1, f)][2:4] == ("DIFFER", "DIFFER") for f in first), "4 of 4")

# %% [markdown]
# Bit-identical with everything saved; leaving out any generator or the data position changes the
# very next step's loss. The schedule shows up later: the optimizer's own state holds the current
# learning rate, so step 4 still uses the right one; the restarted schedule sets step 5's, and a
# changed update shows in the loss one step after. (**A common mistake** says checkpointing
# dropout layers cannot be exact: it can, once the generators are saved.)
#
# **On a GPU**, saving every state is necessary but not sufficient for bit-identical runs: the
# same operations must also add their numbers in the same order. That needs
# `torch.use_deterministic_algorithms(True)` (kernels that use atomic additions, such as some
# scatter and index backwards, are swapped for deterministic ones or refused),
# `CUBLAS_WORKSPACE_CONFIG=:4096:8` in the environment (cuBLAS otherwise picks its reduction
# strategy per call with the workspace it has), `torch.backends.cudnn.benchmark = False` (no
# autotuner choosing a different convolution algorithm after the restart), and, across ranks,
# the same NCCL algorithms — the same number of ranks on the same topology, with `NCCL_ALGO` and
# `NCCL_PROTO` pinned — since a ring and a tree all-reduce sum in different orders. This lab's
# runs are on CPU processes over gloo, where none of this varies.
#
# ### Exercise 2: `resume_state`
#
# Write `resume_state(sampler, state=None)`: capture every generator and the sampler's position,
# and restore them. The cell hands a training run over to a fresh process through your function.
# The grader checks CUDA's generators too: on a CPU machine it plays them with a stand-in.

# %%
check_your_work("lab12_fault_tolerance", "resume_state")

# %% [markdown] slide="slide"
# ## 4. A rank dies; the job goes on
#
# A live demonstration: 4 ranks train data-parallel and checkpoint every 2 steps. Rank 2 is killed
# with SIGKILL after step 5, as a crashed node would be. The launcher notices the dead rank and
# stops the others; our supervisor (`labkit.checkpoint.failures.supervise`) launches again, and
# every rank resumes.
#
# One subtlety: a rank killed just before its checkpoint has one checkpoint fewer than the others.
# If each rank resumed from its own newest, the ranks would start at different steps and the first
# all-reduce would hang. So the ranks first agree, with an all-reduce (MIN), on the newest step
# *all* of them have — a coordinated recovery line (section 8 shows what happens without one).

# %% slide="subslide"
show(labkit.checkpoint.resume.agreed_step)
run, same = lab.failure_demo(world=4, steps=8, kill=(2, 5))
claim("rank 2 died; the second attempt resumed from step 4", run.attempts == 2
      and run.result["resumed_from"] == 4, f"{run.attempts} attempts")
claim("the result is the uninterrupted run's, to the last bit", same["same"],
      f"weights, optimizer, {same['recomputed']} recomputed losses")

# %% [markdown]
# Step 5 was done twice; nothing else was lost, and the result is the uninterrupted run's
# to the last bit.
#
# **torchrun** — PyTorch's launcher for real clusters — does the supervising itself: with
# `--max-restarts`, when a worker dies it stops the others and starts them all again. Our training
# script needs nothing new: every attempt resumes from the newest checkpoint. The command:

# %%
cmd = lab.torchrun_command(2, 4, "ckpt", "final.pt", (1, 3))
print("torchrun", " ".join(cmd[1:6]), "\\")
print("   ", " ".join(cmd[6:]))
final, same = lab.torchrun_demo(world=2, steps=4, fail=(1, 3))
claim("torchrun restarted once; the job ends as if uninterrupted", final["attempt"] == 1
      and same["same"], f"bit for bit, {same['recomputed']} recomputed losses")

# %% [markdown]
# Sometimes no replacement comes. **Graceful degradation** goes on with the ranks that are left:
# each keeps its slice of the batch, so the global batch shrinks from N·b to (N − 1)·b, and the
# learning rate is scaled by (N − 1)/N (the linear scaling rule of Lab 06). The table shows the
# global loss — the whole batch's, the mean over the ranks' equal slices — which is what the run
# optimises; one rank's loss would be the loss of its slice alone.

# %%
fewer = lab.fewer_table(world=4, steps=8, kill=(3, 3))
print(fewer)
resumed = max(r[0] for r in fewer.rows if r[1] == 4)
before = [(a, b) for step, _, a, b in fewer.rows if step <= resumed]
after = [(a, b) for step, _, a, b in fewer.rows if step > resumed]
claim("up to the checkpoint both runs are the same run", all(a == b for a, b in before),
      f"steps 1-{resumed}, bit for bit")
claim("after it, the smaller batch and learning rate change every step", all(a != b for a, b in after),
      f"steps {resumed + 1}-{fewer.rows[-1][0]}")
claim("on 3 ranks the global loss keeps falling", after[-1][1] < before[-1][1],
      f"{before[-1][1]:.4f} at step {resumed} -> {after[-1][1]:.4f} at step {fewer.rows[-1][0]}")

# %% [markdown]
# The loss curve goes on from the checkpoint, differently from the uninterrupted run's (a smaller
# batch, a smaller step) but downwards.

# %% [markdown]
# ## 5. Sharded checkpoints: save on N ranks, load on M
#
# A ZeRO-3/FSDP model (Lab 10) has no rank that holds it whole. Each rank writes its own shards
# with PyTorch's distributed checkpoint (DCP), together with a metadata file saying which piece of
# which tensor is where; on loading, each rank reads the pieces it now needs — on any number of
# ranks. Our FSDP's shards become DTensors for this (a flat group's shard on rank r is
# `torch.chunk`'s r-th piece of the group), so PyTorch's planner does the resharding.
#
# **Predict first:** saved on 3 ranks and loaded on 1, 2 and 4: is what each loads exactly what
# was saved? And after two more steps of training, how far from the run that never stopped?

# %%
reshard = dcp_measure.reshard_table(saved_on=3, load_on=(1, 2, 4))
print(reshard)
claim("loaded on 1, 2 and 4 ranks: parameters and Adam's m, v, step as saved",
      reshard.column("loaded = saved, bit for bit") == ["yes"] * 3, "bit for bit")
drift = max(reshard.column(reshard.columns[3]))
claim("two steps later, rounding only", drift < 1e-12, f"largest difference {drift:.1e} in float64")
sizes = {name: int(size.split()[0]) for name, size in
         (part.split(" ", 1) for part in reshard.title.removeprefix("files: ").split(", "))}
claim("rank 0's file is the largest", sizes["__0_0.distcp"] > max(sizes["__1_0.distcp"], sizes["__2_0.distcp"]),
      f"{sizes['__0_0.distcp']} B vs {sizes['__1_0.distcp']} B")

# %% [markdown]
# Loaded exactly, and after training on, rounding only: the sums of the gradients run over
# another number of ranks. Rank 0's file is larger: it also holds what every rank has (the whole
# 1-D groups, step counters, the layout).
#
# **Save each checkpoint into a new folder.** DCP writes the data files in place and `.metadata`
# last (through a temporary file and a rename). Saved with `overwrite=True` into the folder of an
# older checkpoint, a save that dies half way leaves the *old* `.metadata` next to data files
# that are partly new — and the old metadata describes them well enough to load. Here a save of
# all-2 tensors over a checkpoint of all-1 tensors dies as it opens its second data file:

# %%
torn = lab.overwrite_demo()
print(torn)
claim("the torn checkpoint loads without an error: a new, b old", torn["error"] is None
      and torn["a"] == [2.0] and torn["b"] == [1.0], "a checkpoint that never existed")

# %% [markdown]
# A new folder per step (and a pointer to the newest, written atomically as in section 2) keeps the
# old checkpoint whole until the new one is complete. `async_save` copies the state and writes it
# in the background while training goes on; the loop waits only for the copy. Bandwidths next to
# this disk's own, measured in the same run (they vary from run to run):

# %% tags=["nbval-ignore-output"]
print(dcp_measure.dcp_table())

# %% [markdown]
# ## 6. How often to checkpoint
#
# Each checkpoint costs C seconds; each failure loses, on average, half an interval τ of work. The
# wasted fraction is about C/τ + τ/(2M), smallest at **Young's interval** τ = √(2CM). Daly (2006)
# kept the exact cost of a job in which failures strike during work, checkpoints and restarts
# alike, and found a higher-order formula; the exact optimum solves a short equation.
#
# **Predict first:** for the 10 000-GPU job with C = 60 s, about how many minutes between
# checkpoints? And when C = 5 min but M = 15 min, how far apart are Young's and Daly's answers?
#
# The simulation — failures as a Poisson process in wall time, during work, checkpoints and
# restarts alike — runs the job at every interval of a fixed ladder, 2^(k/8) minutes from half to
# twice the optimum, that no formula chose; and at Young's and Daly's intervals themselves. "z" is
# how many standard errors a formula's simulated wall time lies above the ladder's best.

# %%
opt = interval.optimum_table()
print(opt)
col = {c: opt.column(c) for c in opt.columns}
claim("the simulation cannot tell Daly's interval from its best", max(col["z Daly"]) < 3,
      f"z = {', '.join(f'{z:.1f}' for z in col['z Daly'])}: all below 3")
claim("simulation and closed form agree at Daly's interval", max(map(abs, col["sim - closed"])) < 3,
      "within 3 SE in each case")
claim("C = 5 min, M = 15 min: Young's interval is measurably worse", col["z Young"][2] > 4,
      f"z = {col['z Young'][2]:.1f}")
claim_close("for the big job Young and Daly are within a minute", col["Young"][0], col["Daly"][0], abs_=1.0,
            unit=" min")
claim("... and their wall times within a few thousandths of a per cent", col["Young +%"][0] < 0.01,
      f"{col['Young +%'][0]:.3f} %")
claim_between("C = 5 min, M = 15 min: Young's interval is a third above the optimum",
              col["Young"][2] / col["exact"][2], 1.25, 1.4)
claim_between("... and costs almost 3 % more wall time", col["Young +%"][2], 2.5, 3.0, unit=" %")

# %% [markdown]
# For the big job Young and Daly differ by about half a minute, and the wall time by a few
# thousandths of a per cent: nothing the simulation can see. When checkpoints are expensive next
# to the MTBF, Young's first-order answer is visibly off: a third longer than the optimum, and
# almost 3 % more wall time, which the simulation sees plainly. `tests/test_checkpoint_interval.py`
# asserts the same.
#
# A day-long job, drawn: useful work, checkpoints, lost work and restarts; move the interval and the
# MTBF and watch the waste.

# %%
lab.job_timeline_widget()

# %% [markdown]
# ### Exercises 3 and 4: `young_interval`, `simulate_wall_time`

# %%
check_your_work("lab12_fault_tolerance", "young_interval")

# %%
check_your_work("lab12_fault_tolerance", "simulate_wall_time")

# %% [markdown]
# ## 7. Without checkpoints: checksums and votes
#
# **Algorithm-based fault tolerance** (Huang and Abraham, 1984) protects a computation by its own
# arithmetic. Append to A a row of its column sums and to B a column of its row sums; the product
# then carries a row and a column of checksums of C = A·B. One wrong element makes exactly one row
# checksum and one column checksum disagree: their crossing locates it, and the row checksum gives
# back its right value.

# %%
gen = torch.Generator().manual_seed(0)
p = abft.abft_matmul(torch.randn(5, 4, generator=gen, dtype=torch.float64),
                     torch.randn(4, 6, generator=gen, dtype=torch.float64))
bad = abft.inject(p, 3, 2, 7.5)
found = abft.detect(bad)
err = (abft.correct(bad) - p.C).abs().max().item()
claim("the corrupted element is located from the checksums", found == (3, 2), f"found at {found}")
claim("and corrected from the row checksum", err <= 1e-12, f"max error {err:.1e}")
flops = abft.flops_table()
print(flops)
claim("counted FLOPs equal both closed forms for every n",
      flops.column("counted") == flops.column("2n^3") and flops.column("counted ABFT") == flops.column("2(n+1)^2 n"),
      f"n = {flops.column('n')}")
over = dict(zip(flops.column("n"), flops.column("overhead %")))
claim("the overhead is under 1 % from n = 256", over[256] < 1 and over[1024] < 1, f"{over[256]:.3f} % at n = 256")

# %% [markdown]
# The extra work is one row and one column of a matmul: (2n+1)/n² of it, under 1 % from n = 256.
#
# ### Exercise 5: `abft_locate`

# %%
check_your_work("lab12_fault_tolerance", "abft_locate")

# %% [markdown]
# **Replication with voting**: run three copies and take the majority (triple modular redundancy,
# TMR). With a perfect voter it works when at least two of three do: R_TMR = 3R² − 2R³. **A common
# mistake** quotes 1 − (1 − R)^N — that is *parallel* redundancy, where any one working copy is
# enough because a failed one is known to have failed; a vote has to out-number wrong answers.
#
# **Predict first:** for which R does TMR beat a single unit?

# %%
vote = voting.voting_table()
print(vote)
R, tmr, gain, par = (vote.column(c) for c in ("R", "TMR 3R²-2R³", "TMR - R", "1-(1-R)³ (not voting)"))
sims = [tuple(map(float, cell.split(" ± "))) for cell in vote.column("TMR simulated")]
claim("simulation agrees with 3R² - 2R³", all(abs(est - t) <= 4 * se for (est, se), t in zip(sims, tmr)),
      "within 4 standard errors in every row")
claim("TMR beats one unit exactly when R > 1/2", all((g > 0) == (r > 0.5) for g, r in zip(gain, R)),
      f"gain at R = 0.3: {gain[0]:+.3f}, at 0.5: {gain[1]:+.3f}")
claim("the parallel formula overstates TMR everywhere", all(p_ > t for p_, t in zip(par, tmr)),
      f"{len(R)} of {len(R)} rows")

# %% [markdown]
# TMR helps only when R > 1/2 — exactly at 1/2 the curves cross — and the parallel formula
# overstates it everywhere.
#
# ## 8. Coordinated checkpoints, and the domino effect
#
# In a program of message-passing processes that checkpoint each on its own schedule, a rollback
# can *orphan* a message: its receiver remembers receiving it, but its sender, rolled back, has not
# sent it yet. Then the receiver must roll back too, which can orphan another message, and so on —
# the **domino effect** (Randell, 1975), sometimes all the way to the start. Checkpoints taken
# together (after a barrier, or by the Chandy–Lamport snapshot) are always consistent, which is why
# training jobs checkpoint every rank at the same step.

# %%
dom = domino.domino_table()
print(dom)
d = {(r[0], r[1]): dict(zip(dom.columns, r)) for r in dom.rows}
claim("few messages: independent checkpoints lose less", d[(15, "independent")]["mean lost s"]
      < d[(15, "coordinated")]["mean lost s"], f"{d[(15, 'independent')]['mean lost s']:.1f} s vs "
      f"{d[(15, 'coordinated')]['mean lost s']:.1f} s")
claim("many messages: they lose far more", d[(240, "independent")]["mean lost s"]
      > 2 * d[(240, "coordinated")]["mean lost s"], f"{d[(240, 'independent')]['mean lost s']:.1f} s vs "
      f"{d[(240, 'coordinated')]['mean lost s']:.1f} s")
claim_close("240 messages: all roll back to the start in a fifth of the runs",
            d[(240, "independent")]["all to 0 %"], 20, abs_=5, unit=" %")
claim("coordinated checkpoints never roll back more than one period",
      max(v["max rollback s"] for k, v in d.items() if k[1] == "coordinated") <= 10, "10 s")

# %% [markdown]
# With few messages, independent checkpoints lose *less* (each process rolls back only to its own
# newest); with many, rollbacks cascade — to the very start in a fifth of the runs — while
# coordinated checkpoints never lose more than one period.
#
# ## 9. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** 16 384 GPUs, each with an MTBF of 3 years. Checkpoints take 2 minutes. What is
# Young's interval?
#
# <details><summary>Answer</summary>
#
# M = 3·365·86 400 / 16 384 ≈ 5 775 s (1.6 h); τ = √(2·120·5 775) ≈ **1 177 s ≈ 19.6 min**.
#
# </details>
#
# **Problem 2.** With that interval, roughly what fraction of the run is wasted (first order)?
#
# <details><summary>Answer</summary>
#
# C/τ + τ/(2M) = 120/1 177 + 1 177/11 550 ≈ 0.102 + 0.102 = **20 %** — both terms equal at the
# optimum, √(2C/M).
#
# </details>
#
# **Problem 3.** A unit works with probability 0.95 over a mission. TMR with a perfect voter?
#
# <details><summary>Answer</summary>
#
# 3·0.95² − 2·0.95³ = **0.99275**.
#
# </details>
#
# **Problem 4.** A checkpoint is written every 500 steps; a rank dies at step 1 740 just after its
# step but before any save. From which step does the job resume, and how many steps are redone?
#
# <details><summary>Answer</summary>
#
# From step **1 500**; steps 1 501–1 740, **240** steps, are done again.
#
# </details>

# %%
# The answers above, computed (the tests check the same numbers).
M16 = interval.system_mtbf(3 * 365 * 86400, 16384)
tau = interval.young_interval(120, M16)
print(round(M16), round(tau), round(interval.first_order_waste(tau, 120, M16), 3),
      round(voting.tmr_reliability(0.95), 5))
claim("Problems 1-3 as answered", (round(M16), round(tau), round(interval.first_order_waste(tau, 120, M16), 2),
                                   round(voting.tmr_reliability(0.95), 5)) == (5774, 1177, 0.2, 0.99275),
      f"M {M16:.0f} s, tau {tau:.0f} s = {tau / 60:.1f} min")

# %% [markdown]
# ## 10. Beyond one checkpoint: tiers and replicas
#
# Section 6 paid for every failure with the same checkpoint: written to storage every τ, restored
# from storage after each failure, with half an interval lost on average. Minutes to write makes τ
# long. But most failures destroy much less than everything: a crashed *process* leaves its
# machine's memory intact, and a lost *machine* leaves the others'. Two ideas follow.
# **Hierarchical checkpoints** keep cheap, frequent copies in memory for the common failures and
# the expensive one on storage for the rare ones. **Replication** keeps a second copy of a part of
# the job running, so that its loss costs no rollback at all.
#
# ### 10.1 Three tiers, on real ranks
#
# `labkit.checkpoint.hierarchical` trains the GPT of section 3 on 4 ranks, pretending that ranks
# 0–1 and 2–3 are two machines ("nodes"), with three tiers of checkpoints:
#
# * **memory**, every step: each rank writes its whole state (weights, optimizer, schedule,
#   generators, data position) to its node's memory, a RAM-backed folder (`/dev/shm`) that outlives
#   the process but not the machine. CheckFreq (Mohan et al., 2021) calls this cheap copy the
#   *snapshot*.
# * **peer**, every step: the snapshot's bytes go over the process group to a rank on *another*
#   node, which keeps them in its memory. Gemini (Wang et al., 2023) checkpoints large-model
#   training to the CPU memory of the machines themselves this way.
# * **disk**, every 4 steps: a background thread writes the snapshot to disk while training goes
#   on (CheckFreq's *persist*), at most one write in flight.
#
# After a failure the ranks agree on the newest step that *every* rank can get back from some tier
# (a recovery line, as in section 4), and each takes it from the nearest tier that has it: its
# memory, else its peer (which sends the bytes back), else the disk.
#
# | failure | example | memory | peer copy | disk |
# |---|---|---|---|---|
# | process | a rank's process crashes | kept | kept | kept |
# | node | a machine, and its memory, is lost | lost | kept (on another node) | kept |
# | job | every machine's memory is lost | lost | lost | kept |
#
# **Predict first:** rank 1 dies after step 7. For each kind of failure, from which step does the
# job resume, and how many steps are done again? With the disk alone?

# %%
from labkit.checkpoint import hierarchical, multilevel

tiers, tier_times = lab.tiers_demo()
print(tiers)
t = {r[0]: dict(zip(tiers.columns, r)) for r in tiers.rows}
claim("after every kind of failure the run ends bit for bit as the uninterrupted one",
      tiers.column("= uninterrupted") == ["yes"] * 3, "process, node, job")
claim("a process failure: all four ranks resume from memory at step 6, one step redone",
      (t["process"]["ranks resumed from"], t["process"]["step"], t["process"]["redone"]) == ("memory x4", 6, 1))
claim("a node failure: its two ranks resume from their peers' copies, at the same step",
      (t["node"]["ranks resumed from"], t["node"]["step"]) == ("memory x2, peer x2", 6), t["node"]["memory lost"])
claim("every memory lost: the disk, three steps redone - what the disk alone redoes every time",
      (t["job"]["ranks resumed from"], t["job"]["redone"]) == ("disk x4", 3)
      and tiers.column("disk only: redone") == [3, 3, 3])

# %% [markdown]
# The cost of each tier on this machine, measured in the same runs (they vary from run to run):

# %% tags=["nbval-ignore-output"]
ms = lambda xs: f"{1e3 * sum(xs) / len(xs):.1f} ms"  # noqa: E731
print(f"per step: snapshot + peer copy {ms(tier_times['stall'])}; a background disk write "
      f"{ms(tier_times['persist'])}")
print("restore (slowest rank):", ", ".join(f"{k} {1e3 * max(tier_times[k]):.0f} ms" for k in ("process", "node", "job")))

# %% [markdown]
# On this machine every tier is memory: the "disk" writes land in the operating system's page
# cache, and the peer is a process on the same machine. The measured restore times are all tens
# of milliseconds; the difference that matters is *how far back* each tier is — one step for the
# memory tiers, up to the disk interval for the disk. On a cluster the gap in speed is real too:
# a snapshot copies from GPU to host memory, a peer copy crosses the network once, and the disk is
# shared storage that every rank writes at once.
#
# Where each rank's copy goes matters: pick a failure and a node.

# %%
lab.tiers_widget(hierarchical.peer_ranks(8, 2), 2)

# %% [markdown]
# ### Exercise 6: `peer_ranks`
#
# Write `peer_ranks(world, per_node)`: for every rank, the rank that keeps its in-memory copy —
# never on its own node, and every rank keeping exactly one copy. The cell draws yours and lists,
# node by node, the ranks a node's loss would send back to the disk.

# %%
check_your_work("lab12_fault_tolerance", "peer_ranks")

# %% [markdown]
# ### 10.2 Expected wall time: one level against three
#
# Section 6's simulator, generalised (`labkit.checkpoint.multilevel`): levels with their own
# interval (the finer ones nested in the coarser), checkpoint cost and restart time, and kinds of
# failure with their own MTBF, each falling back to the newest checkpoint of a level it leaves
# intact. With one level and one kind it is section 6's model. To first order the waste is
#
#     Σ_levels C_l/τ_l  +  Σ_kinds λ_k·(τ_{l(k)}/2 + R_{l(k)}),
#
# l(k) the level failure kind k falls back to: each level pays its own C/τ, and each failure half
# an interval *of its own level* plus that level's restart. So each level's best interval is
# Young's √(2C_l/Λ_l), Λ_l the rate of the failures it serves.
#
# An example — assumed numbers, not measured ones: a process fails every 3 hours, a machine every
# 12, every machine's memory every 48 (the sum: one failure per 2.3 hours); a memory checkpoint
# blocks 1 s (restart 1 min), a peer copy 5 s (restart 1.5 min), a disk checkpoint 2 min (restart
# 5 min). Young's intervals come out at 2.4, 11 and 107 minutes; we take 150 s, 600 s, 6000 s.
#
# **Predict first:** 24 hours of work. How long does the job take with the disk alone at Daly's
# interval (section 6), and with all three tiers?

# %%
levels, kinds = lab.scenario()
young = multilevel.young_per_level(levels, kinds)
print("Young's interval per level:", ", ".join(f"{k} {v:.0f} s" for k, v in young.items()))
mtbf = 1 / sum(1 / k.mtbf_s for k in kinds)
claim_close("one failure every 2.3 hours", mtbf / 3600, 2.3, abs_=0.05, unit=" h")
claim("Young's intervals: 2.4, 11 and 107 minutes",
      [round(v / 60, 1) for v in young.values()] == [2.4, 11.0, 107.3], str([round(v / 60, 1) for v in young.values()]))
claim_close("Daly's interval for the disk alone is 22 minutes", interval.daly_interval(120.0, mtbf) / 60, 22, abs_=0.5,
            unit=" min")
print(lab.recovery_table())
wall = lab.multilevel_table()
print(wall)
w = {r[0]: dict(zip(wall.columns, r)) for r in wall.rows}
closed = w["disk only, closed form"]["wall h"]
for name in ("Lab 12 simulator", "multi-level simulator"):
    claim_close(f"disk only: {name} = closed form, to 3 SE", w[f"disk only, {name}"]["wall h"], closed,
                abs_=round(3 * w[f"disk only, {name}"]["+- h"], 2), unit=" h")
three, two = w["memory + peer + disk"], w["memory + disk"]
claim_between("three tiers save more than 3.5 hours of the 29.7", closed - three["wall h"], 3.5, 4.5, unit=" h")
claim_between("the peer tier alone is worth about 1.6 hours", two["wall h"] - three["wall h"], 1.5, 1.8, unit=" h")
for r in (two, three):
    claim_close(f"{r['scheme']}: first order within 2 % of the simulation", r["first order h"], r["wall h"], rel=0.02,
                unit=" h")
process = lab.recovery_table().rows[0]
claim("a process failure costs 135 s instead of 963 s", [round(x) for x in process[5:]] == [135, 963])
claim_between("three tiers: under 26 hours", three["wall h"], 25.0, 26.0, unit=" h")
claim_between("for the disk alone the first order is 2 to 3 % short",
              1 - w["disk only, Lab 12 simulator"]["first order h"] / closed, 0.02, 0.03)

# %% [markdown]
# The disk alone: 29.7 hours, and section 6's simulator and ours agree with the closed form. Three
# tiers: under 26 hours. Process failures, the commonest, now cost two minutes and a quarter
# instead of sixteen; the disk interval stretches from 22 minutes to 100, because only the rare
# loss of every machine needs it. Without the peer copy, every lost machine falls back to the disk:
# about 1.6 hours more. (The first-order formula is within a per cent or two here; for the disk alone,
# where a fifth of the time is wasted, it is 2.4 % short — the closed form of section 6 is exact.)
#
# ### 10.3 Selective replication
#
# A checkpoint, however close, still means stopping, restarting and redoing work. A **replica**
# — a standby that follows the component it protects and takes over when it fails — costs no
# rollback, but doubles the devices of what it protects. Replicating everything is rarely worth
# it; replicating the part whose failure costs most for its size often is.
#
# The classic case is the parameter server of Lab 06: one process whose loss stops every worker.
# `labkit.checkpoint.replicated_ps` adds one process, a backup. The primary sums the workers'
# gradients, forwards the new parameters to the backup and waits for its acknowledgement before
# replying to the workers; when the primary dies, the backup takes over, and a worker whose push
# went unanswered sends it again (a push for a clock the backup already has is answered, not
# applied twice). The primary is killed with SIGKILL at clock 5, once just after forwarding and
# once just before.
#
# **Predict first:** in each case, does every worker end with exactly the parameters of a run
# that never failed? And without the backup?

# %%
ps = lab.replicated_ps_table()
print(ps)
r = {row[0]: row for row in ps.rows}
claim("with a backup, every run finishes with one process's synchronous SGD, bit for bit",
      all(r[k][1] == r[k][3] == "yes" for k in ("no failure", "primary dies after forwarding",
                                                "primary dies before forwarding")), "3 runs")
claim("the backup takes over from clock 5, or from 4 and redoes 5 if the primary died before forwarding",
      (r["primary dies after forwarding"][2], r["primary dies before forwarding"][2]) == (5, 4))
claim("without a backup the run ends; a worker reports it",
      r["primary dies, no backup"][1] == "no" and r["primary dies, no backup"][3].startswith("a worker"),
      r["primary dies, no backup"][3])

# %% [markdown]
# No clock lost, none applied twice: the result is the failure-free run's, to the last bit. The
# price is one process and one message per clock. Without the backup a worker's wait ends with
# "connection reset" and the job with it.
#
# Which part of a larger job deserves a standby? Per standby machine, a replica removes
# λ·(τ/2 + R − F) of wall time per second of work (λ a machine's failure rate, R the component's
# restart, F the failover): the most where restarting that component is slow. An example with
# assumed numbers: a pipeline whose first stage holds the embedding tables on 4 large-memory hosts
# (a restart reloads them: 30 minutes) and three transformer stages on 4 GPU nodes each (restart
# 5 minutes), every machine failing once a month, checkpoints hourly:

# %%
rep = lab.replication_table()
print(rep)
e = {row[0]: row for row in rep.rows}
per_machine = e["embedding"][3] / e["stage 1"][3]
claim_between("a standby for the embedding stage removes 1.7 times the waste per machine", per_machine, 1.6, 1.8)
claim("replicating every stage doubles the machines to cut the waste by under a third",
      e["embedding, stage 1, stage 2, stage 3"][1] == 16 and
      e["embedding, stage 1, stage 2, stage 3"][2] > 2 / 3 * e["none"][2],
      f"{e['none'][2]:.2f} % -> {e['embedding, stage 1, stage 2, stage 3'][2]:.2f} %")
best, _ = multilevel.best_replication(lab.pipeline_components(), 3600.0, 120.0, 30.0, extra_devices=4)
claim("with 4 spare machines the best choice is the embedding stage", best == ("embedding",), str(best))

# %% [markdown]
# Replicating everything removes less than a third of the waste for twice the machines; a standby
# for the slow stage alone removes the most per machine. The same reasoning puts replicas on
# parameter servers, schedulers and metadata services — small parts whose loss stops everything —
# and checkpoints on the rest.
#
# ### 10.4 Worked problems
#
# **Problem 5.** Memory snapshots every 2 minutes, restart from memory in 1 minute. What does a
# process failure cost on average? And with disk checkpoints every 30 minutes and a 5-minute
# restart?
#
# <details><summary>Answer</summary>
#
# Memory: 60 + 120/2 = **120 s**. Disk: 300 + 1 800/2 = **1 200 s**, ten times as much.
#
# </details>
#
# **Problem 6.** 16 ranks on nodes of 8. Give a placement of the peer copies that survives the
# loss of any one node. Does rank r's copy on rank r + 1 work?
#
# <details><summary>Answer</summary>
#
# **peers[r] = (r + 8) mod 16**: each rank's copy on the other node. r + 1 keeps 14 of the 16
# copies on their own node: losing a node loses all but one of its ranks' checkpoints.
#
# </details>
#
# **Problem 7.** Memory checkpoints block 2 s every 100 s; disk checkpoints 200 s every 5 000 s.
# Process failures every 2 hours restart from memory (30 s), the rest — every 50 hours — from
# disk (600 s). What fraction is wasted, to first order?
#
# <details><summary>Answer</summary>
#
# 2/100 + 200/5 000 + (50 + 30)/7 200 + (2 500 + 600)/180 000 = 0.020 + 0.040 + 0.011 + 0.017 ≈
# **8.8 %**.
#
# </details>
#
# **Problem 8.** Why must the primary server wait for the backup's acknowledgement before replying
# to the workers?
#
# <details><summary>Answer</summary>
#
# Otherwise a worker could compute its next gradient on parameters the backup never received. If
# the primary then died, the backup would redo the clock from the older parameters while that
# worker's gradient came from newer ones: the run would match **no** failure-free run.
#
# </details>

# %%
# The answers above, computed (the tests check the same numbers).
from labkit.checkpoint.multilevel import Failure, Level

p5 = (60 + 120 / 2, 300 + 1800 / 2)
p6 = hierarchical.peer_ranks(16, 8)
wrong = [(r + 1) % 16 for r in range(16)]
p7 = multilevel.first_order_waste(100.0, [Level("memory", 1, 2.0, 30.0), Level("disk", 50, 200.0, 600.0)],
                                  [Failure("process", 7200.0, ("memory", "disk")), Failure("rest", 180000.0, ("disk",))])
print(p5, p6[:4], round(p7, 4))
claim("Problem 5: 120 s and 1200 s", p5 == (120.0, 1200.0))
claim("Problem 6: (r + 8) mod 16 survives any node; r + 1 keeps 14 copies on their own node",
      hierarchical.check_peers(p6, 16, 8) == p6 and sum(p // 8 == r // 8 for r, p in enumerate(wrong)) == 14)
claim_close("Problem 7: 8.8 % wasted", p7, 0.088, abs_=0.0005)

# %% [markdown]
# ## Further reading
#
# * J. W. Young, *A first order approximation to the optimum checkpoint interval*, CACM 1974;
#   J. T. Daly, *A higher order estimate of the optimum checkpoint interval for restart dumps*,
#   FGCS 2006.
# * K.-H. Huang and J. A. Abraham, *Algorithm-Based Fault Tolerance for Matrix Operations*, IEEE
#   Transactions on Computers, 1984.
# * B. Randell, *System structure for software fault tolerance*, 1975 (the domino effect);
#   K. M. Chandy and L. Lamport, *Distributed Snapshots*, 1985.
# * PyTorch: *torchrun (Elastic Launch)*; *Distributed Checkpoint (DCP)* and its `async_save`.
# * J. Mohan, A. Phanishayee and V. Chidambaram, *CheckFreq: Frequent, Fine-Grained DNN
#   Checkpointing*, FAST 2021; Z. Wang et al., *GEMINI: Fast Failure Recovery in Distributed
#   Training with In-Memory Checkpoints*, SOSP 2023; A. Moody et al., *Design, Modeling, and
#   Evaluation of a Scalable Multi-level Checkpointing System*, SC 2010.
#
# ## Summary
#
# * A job on N devices fails N times as often as one device. Checkpoint every √(2CM) or so (Daly's
#   formula when C is not small next to M); the waste is then about √(2C/M).
# * Write checkpoints to a temporary file, fsync, rename, fsync the folder: a crash leaves the old
#   one whole, and a power cut too (a kill alone cannot tell whether you fsync-ed). Add a checksum
#   so damage is refused, keep more than one, and give each sharded checkpoint its own folder.
# * A bit-identical resume needs every random generator, the data position and the schedule, not
#   just the weights; ranks must agree on one step to resume from. On a GPU it also needs
#   deterministic kernels, a fixed cuBLAS workspace and the same NCCL algorithms.
# * A supervisor — ours, or torchrun with `--max-restarts` — turns a dead rank into a few redone
#   steps. Sharded checkpoints (DCP) load on any number of ranks.
# * ABFT corrects a matmul's errors for (2n+1)/n² extra work; voting needs R > 1/2 to help.
# * Most failures destroy less than everything: checkpoints in memory (every step), on a peer of
#   another node, and on disk in the background let each failure fall back only as far as it must;
#   each level gets Young's interval for the failures it serves. A standby replica costs no
#   rollback but doubles what it protects: give one to the parts that are small and slow to restart.
#
# **Exercises** (in `exercises/lab12_fault_tolerance.py`): `atomic_save`, `resume_state`,
# `young_interval`, `simulate_wall_time`, `abft_locate`, `peer_ranks`; each has a "check your work"
# cell above.
# Grade them with `python -m labkit.grade --lab 12` (or `make grade LAB=12`).
