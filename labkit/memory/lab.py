"""The Lab 09 notebook's one-liners, and its "check your work" pictures.

    budget_table(num_params)             model-state bytes of a model of Ψ parameters (the 70B budget)
    state_table(cfg)                     bytes per parameter measured after an Adam step, fp32 and mixed
    activation_table(cfg, batch_size)    our GPT's saved activations: closed form by part, measured
    step_timeline(n_layers, segment)     one training step of a chain, bytes by category after each op
    picture(exercise)                    a learner's function next to the lab's measurement
    chain_table, kv_table, cnn_rnn_table inference memory (section 12): measured next to closed forms
    lifetime_player(widths, batch)       which activations of a chain are alive, forward-only vs training
    wall_table(), wall_player()          the memory wall: published models' states vs the largest device

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from labkit.checks import check_int, check_real
from labkit.memory.activation_checkpointing import chain_peak_bytes, checkpointed_chain, make_chain
from labkit.memory.estimate import (activation_bytes_per_layer, gpt_layer_saved_bytes, gpt_saved_activation_bytes,
                                    model_state_bytes_per_param)
from labkit.memory.mixed_precision import MixedPrecisionAdam
from labkit.memory.tracker import MemoryTracker
from labkit.model import GPT, MEMORY_GPT, GPTConfig, batch, parameter_count
from labkit.table import Table

GB = 1e9


def budget_table(num_params: float = 70e9, gpu_bytes: float = 80e9) -> Table:
    """Mixed-precision Adam training of a Ψ-parameter model: bytes of each model state, in GB, and
    how many ``gpu_bytes`` devices they fill before any activation."""
    psi = check_real("budget_table", "num_params", num_params, positive=True)
    rows = [("weights (bf16)", 2), ("gradients (bf16)", 2), ("fp32 master weights", 4), ("Adam m (fp32)", 4),
            ("Adam v (fp32)", 4)]
    total = sum(b for _, b in rows)
    out = [(name, b, psi * b / GB) for name, b in rows]
    out += [("total", total, psi * total / GB), ("Adam states as m, v only (a slip)", 8, psi * 8 / GB)]
    return Table(["state", "bytes/param", "GB"], out, formats={"GB": ",.0f"},
                 title=f"Ψ = {psi / 1e9:g}B parameters: {math.ceil(psi * total / gpu_bytes)} devices of "
                       f"{gpu_bytes / GB:g} GB for the states alone")


def _held_after_step(cfg: GPTConfig, mixed: bool) -> dict:
    model = GPT(cfg, dtype=torch.bfloat16 if mixed else torch.float32)
    opt = MixedPrecisionAdam(model.parameters()) if mixed else torch.optim.Adam(model.parameters())
    model(*batch(cfg, 2))[1].backward()
    opt.step()
    tracker = MemoryTracker(model, opt)
    with tracker:
        return tracker.live_by_category()


def state_table(cfg: GPTConfig = MEMORY_GPT) -> Table:
    """Model-state bytes measured after one Adam step on our GPT (MemoryTracker), per parameter,
    next to the closed form: fp32 4 + 4 + 8; mixed precision 2 + 2 + 12 (master, m, v). Adam keeps
    one 4-byte step counter per parameter tensor, hence the last digits."""
    psi, tensors = parameter_count(cfg), len(list(GPT(cfg).parameters()))
    rows = []
    for mixed in (False, True):
        held = _held_after_step(cfg, mixed)
        want = model_state_bytes_per_param(mixed)
        total = held["parameters"] + held["gradients"] + held["optimizer"]
        rows.append(("bf16 + fp32 master" if mixed else "fp32", held["parameters"] / psi, held["gradients"] / psi,
                     held["optimizer"] / psi, total / psi, want["total"] + 4 * tensors / psi))
    return Table(["training", "params B/p", "grads B/p", "optimizer B/p", "total B/p", "16 + 4·tensors/Ψ"], rows,
                 formats={k: ".4f" for k in ("params B/p", "grads B/p", "optimizer B/p", "total B/p",
                                              "16 + 4·tensors/Ψ")},
                 title=f"GPT {cfg.layers} layers, h={cfg.hidden}: Ψ = {psi:,} parameters in {tensors} tensors")


def activation_table(cfg: GPTConfig = MEMORY_GPT, batch_size: int = 4, dtype: torch.dtype = torch.bfloat16) -> Table:
    """Our GPT's saved activations after forward: the closed form, part by part, its total next to
    the bytes the tracker sees (minus logits and loss, which are outputs); then one layer of ours
    reconciled with Korthikanti et al.'s per-layer formula 34·s·b·h + 5·a·s²·b (16-bit), term by
    term: + dropout (two s·b·h masks of 1 byte, the attention's a·s²·b mask and its 2·a·s²·b
    output), − LayerNorm statistics (4·b·s·e), − the causal mask (s², one byte a pair)."""
    parts = gpt_saved_activation_bytes(cfg, batch_size, dtype=dtype)
    model = GPT(cfg, dtype=dtype)
    tracker = MemoryTracker(model)
    with tracker:
        tokens, targets = batch(cfg, batch_size)
        logits, loss = model(tokens, targets)
        measured = tracker.live_by_category()["activations"] - logits.nbytes - loss.nbytes
    s, b, h, a, e = cfg.seq_len, batch_size, cfg.hidden, cfg.heads, torch.finfo(dtype).bits // 8
    layer = gpt_layer_saved_bytes(cfg, b, s, e)
    paper = activation_bytes_per_layer(s, b, h, a)
    dropout, stats, mask = 2 * s * b * h + 3 * a * s * s * b, 4 * b * s * e, s * s
    rows = [(k, v) for k, v in parts.items()] + [
        ("measured (tracker)", measured),
        ("one layer of ours", layer),
        ("  + dropout 2sbh + 3as²b", dropout),
        ("  - LayerNorm stats 4bse", -stats),
        ("  - causal mask s²", -mask),
        ("  = reconciled", layer + dropout - stats - mask),
        ("Korthikanti 34sbh + 5as²b", int(paper))]
    return Table(["part", "bytes"], rows, title=f"GPT {cfg.layers} layers h={cfg.hidden} heads={cfg.heads} "
                                                f"s={cfg.seq_len}, batch {batch_size}, {str(dtype)[6:]}")


@dataclass(frozen=True)
class Timeline:
    """One training step of a chain: bytes by category after every op (``samples``), the peak of
    all bytes, and the closed form of the peak activation bytes (``closed_form``,
    `labkit.memory.activation_checkpointing.chain_peak_bytes`; None for a learner's own function)."""

    n_layers: int
    segment: int | None
    samples: tuple
    peak: int
    closed_form: int | None


def step_timeline(n_layers: int = 8, segment: int | None = None, width: int = 16, batch_size: int = 64) -> Timeline:
    """Track one Adam step (forward, backward, step) of ``make_chain(n_layers, width)`` on a
    (batch_size, width) input, checkpointed in segments of ``segment`` layers (None: not at all).
    A first step runs untracked, so Adam's states already exist, as in training."""
    n = check_int("step_timeline", "n_layers", n_layers, minimum=1)
    if segment is not None:
        check_int("step_timeline", "segment", segment, minimum=1, maximum=n)
    layers = make_chain(n, width)
    holder = torch.nn.ModuleList(layers)
    opt = torch.optim.Adam(holder.parameters(), lr=1e-3)

    def run(x):                       # the loss of measure_chain: the closed form's
        y = checkpointed_chain(list(layers), x, segment) if segment else _plain(layers, x)
        return y.sum()

    def data():
        gen = torch.Generator().manual_seed(0)
        return torch.randn(batch_size, width, dtype=torch.float64, generator=gen).requires_grad_()   # (B, w)

    run(data()).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    tracker = MemoryTracker(holder, opt, by_category=True)
    with tracker:
        tracker.mark("forward")
        loss = run(data())            # made inside: the input counts, like every checkpoint
        tracker.mark("backward")
        loss.backward()
        del loss
        tracker.mark("step")
        opt.step()
    closed = chain_peak_bytes(n, segment, batch_size, width, 8, "ours" if segment else "none")
    return Timeline(n, segment, tuple(tracker.timeline), tracker.peak_bytes, closed)


def _plain(layers, x):
    for layer in layers:
        x = layer(x)
    return x


def _block(t: torch.Tensor) -> int:
    """Bytes the caching allocator gives a small tensor: its size rounded up to 512."""
    return -(-t.untyped_storage().nbytes() // 512) * 512


def cuda_peak_table(cfg: GPTConfig = MEMORY_GPT, batch_size: int = 8) -> Table:
    """On a CUDA GPU: one Adam step of our GPT (forward, backward, step) tracked by MemoryTracker,
    next to the CUDA caching allocator's own peak (``torch.cuda.max_memory_allocated``). The
    allocator reads higher, mostly because of the **cuBLAS workspace**: the first matrix multiply
    on a stream allocates it through the caching allocator and keeps it (several MiB, sized by
    ``CUBLAS_WORKSPACE_CONFIG``), and no tensor owns it. The rest is rounding: every block is a
    multiple of 512 bytes (``allocated_bytes`` vs ``requested_bytes`` in ``memory_stats``). The
    workspaces are cleared first, so that the step allocates them again and the table measures them."""
    dev = torch.device("cuda")
    model = GPT(cfg).to(dev)
    opt = torch.optim.Adam(model.parameters())
    tokens, targets = (t.to(dev) for t in batch(cfg, batch_size))

    def step():
        model(tokens, targets)[1].backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    probe = torch.ones(16, 16, device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    outs = [probe @ probe, torch.addmm(probe[0], probe, probe)]   # cuBLAS and cuBLASLt (bias) paths
    torch.cuda.synchronize()
    workspace = torch.cuda.memory_allocated() - before - sum(_block(o) for o in outs)
    del probe, outs
    if clear is not None:
        clear()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    tracker = MemoryTracker(model, opt)
    with tracker:
        step()
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    allocator = torch.cuda.max_memory_allocated()
    rows = [("MemoryTracker (storages)", tracker.peak_bytes), ("CUDA allocator", allocator),
            ("  requested, before 512 B rounding", stats.get("requested_bytes.all.peak", 0)),
            ("  cuBLAS workspace (first matmul)", max(workspace, 0))]
    ratio = f"{allocator / tracker.peak_bytes:.1f}" if tracker.peak_bytes else "-"
    return Table(["count", "peak bytes"], rows, title=f"GPT step on {torch.cuda.get_device_name()}: "
                                                      f"allocator / tracker = {ratio}")


def checkpoint_widget(n_layers: int = 8, width: int = 16, batch_size: int = 64):
    """Play + slider over activation checkpointing's segment length k = none, 1, 2, ..., N: one
    step's memory timeline each (`step_timeline`, all computed first), drawn by `viz.memory`."""
    from labkit.viz.memory import checkpoint_frame
    from labkit.viz.player import player

    timelines = [step_timeline(n_layers, None, width, batch_size)] + \
        [step_timeline(n_layers, k, width, batch_size) for k in range(1, n_layers + 1)]
    ymax = max(t.peak for t in timelines) / 1024 * 1.25
    return player(lambda i: checkpoint_frame(timelines, i, ymax), len(timelines), description="k")


# ---------------------------------------------------------------------- check your work
def checkpoint_picture(fn, n_layers: int = 8, width: int = 16, batch_size: int = 64):
    """Your ``checkpointed_forward`` on a chain for several k: gradients vs the plain chain, peak
    activation bytes vs the every-segment closed form; draws your step's memory timeline at k = 3."""
    from IPython.display import HTML, display

    from labkit.memory.tracker import ActivationPeakTracker
    from labkit.viz.memory import timeline_figure
    from labkit.viz.player import figure_to_html

    rows = []
    for k in (1, 2, 3, 4, n_layers):
        layers = make_chain(n_layers, width, dropout=0.2, seed=1)       # gradients: with dropout
        holder = torch.nn.ModuleList(layers)
        x = torch.randn(batch_size, width, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        x.requires_grad_()
        torch.manual_seed(3)
        _plain(layers, x).sum().backward()
        want = [x.grad.clone()] + [p.grad.clone() for p in holder.parameters()]
        holder.zero_grad(set_to_none=True)
        x.grad = None
        torch.manual_seed(3)
        fn(list(layers), x, k).sum().backward()
        got = [x.grad] + [p.grad for p in holder.parameters()]
        err = max((g - w).abs().max().item() if g is not None else float("inf") for g, w in zip(got, want))
        layers = make_chain(n_layers, width, seed=1)                      # memory: without dropout
        tracker = ActivationPeakTracker(torch.nn.ModuleList(layers))
        with tracker:
            x = torch.randn(batch_size, width, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
            fn(list(layers), x.requires_grad_(), k).sum().backward()
        rows.append((k, f"{err:.1e}", tracker.peak_activation_bytes,
                     chain_peak_bytes(n_layers, k, batch_size, width, 8, "ours"),
                     chain_peak_bytes(n_layers, None, batch_size, width, 8, "none")))
    print(Table(["k", "max |grad error| (dropout)", "your peak bytes", "every segment", "no checkpoints"],
                rows, title=f"your checkpointed_forward on {n_layers} layers Linear({width},{width})+Tanh"))
    timeline = _timeline_of(fn, n_layers, 3, width, batch_size)
    display(HTML(figure_to_html(timeline_figure(timeline, "your checkpointed_forward, k = 3"))))
    return rows


def _timeline_of(fn, n_layers, segment, width, batch_size) -> Timeline:
    layers = make_chain(n_layers, width)
    holder = torch.nn.ModuleList(layers)
    x = torch.randn(batch_size, width, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    tracker = MemoryTracker(holder, by_category=True)
    with tracker:
        tracker.mark("forward")
        loss = fn(list(layers), x, segment).pow(2).mean()
        tracker.mark("backward")
        loss.backward()
    return Timeline(n_layers, segment, tuple(tracker.timeline), tracker.peak_bytes, None)


POLICY_WIDTHS = (128, 192, 32, 48, 192, 192, 256, 64)  # a Linear+Tanh chain whose outputs differ in size and cost
POLICY_BATCH = 16


def policy_picture(fn, widths=POLICY_WIDTHS, batch_size: int = POLICY_BATCH):
    """Your ``checkpoint_policy`` on the matmul outputs of a Linear+Tanh chain, for budgets from
    nothing to everything: what it keeps, the bytes and recomputed FLOPs it predicts, what
    PyTorch's selective checkpointing measures when it keeps exactly those, and the least
    recomputation any choice within the budget reaches (every subset tried)."""
    from labkit.memory.policy import best_by_brute_force, chain_tensors, measure_chain_policy, recomputed

    sizes, costs = chain_tensors(widths, batch_size)
    rows = []
    for share in (0, 0.25, 0.5, 0.75, 1):
        budget = int(share * sum(sizes))
        keep = sorted(fn(list(sizes), list(costs), budget))
        run = measure_chain_policy(widths, batch_size, keep)
        least, _ = best_by_brute_force(sizes, costs, budget)
        kept = sum(sizes[i] for i in keep)
        rows.append((budget, ",".join(map(str, keep)) or "-", kept, run.kept_bytes, recomputed(costs, keep),
                     run.extra_flops, least, kept <= budget and recomputed(costs, keep) == least))
    table = Table(["budget B", "kept", "kept B", "measured B", "recomputed FLOPs", "measured", "least",
                   "optimal"], rows, title=f"matmul outputs of a Linear+Tanh chain {'→'.join(map(str, widths))}, "
                                           f"batch {batch_size}, float32")
    print(table)
    return table


def picture(exercise: str):
    """The ``picture(fn)`` for `check_your_work` of one exercise of exercises/lab09_memory.py."""
    return {"checkpointed_forward": checkpoint_picture, "checkpoint_policy": policy_picture,
            "forward_only_peak": peak_picture, "kv_cache_bytes": kv_picture}[exercise]


# ---------------------------------------------------------------------------- section 12: inference memory
CHAINS = (([64, 64, 64, 64, 64], 8), ([32, 128, 16, 256, 8], 4), ([128] * 6, 16))


def chain_table(chains=CHAINS) -> Table:
    """Per chain (`labkit.memory.inference.chain`): activations, the forward-only peak and what a
    training forward keeps, measured by the tracker next to the closed forms (bytes)."""
    from labkit.memory import inference as I

    rows = []
    for widths, b in chains:
        m, f = I.chain_peaks(widths, b), I.chain_peak_formula(widths, b)
        largest = max(I._activation_bytes(widths, b, 4))
        rows.append([" ".join(map(str, widths)), b, 2 * (len(widths) - 1), largest, m["inference_peak"],
                     f["inference_peak"], m["training_kept"], f["training_kept"]])
    return Table(["widths", "B", "outputs", "largest", "no_grad peak", "formula", "kept (train)", "formula "],
                 rows, title="Linear+ReLU chains, float32 (bytes); peak = max(a1, max a_i + a_(i+1))")


def lifetime_player(widths=(64, 64, 64, 64), batch_size: int = 8):
    """Play + slider over `chain_lifetimes`: each module's run and its input's release, both modes."""
    from labkit.memory.inference import chain_lifetimes
    from labkit.viz.inference import lifetime_html
    from labkit.viz.player import player

    lt = chain_lifetimes(list(widths), batch_size)
    n = len(lt.frames["inference"])
    return player(lambda i: lifetime_html(lt, i, f"a chain of {len(lt.sizes)} modules, batch {batch_size}"), n,
                  interval_ms=800)


def kv_table(tokens: int = 4096, batch_size: int = 1) -> Table:
    """KV-cache bytes per token and for ``tokens`` tokens of ``batch_size`` sequences, for published
    model shapes (`labkit.memory.inference.PUBLISHED_KV`), 16-bit."""
    from labkit.memory.inference import PUBLISHED_KV, kv_cache_bytes_per_token

    rows = []
    for name, (layers, heads, kv_heads, hd, e) in PUBLISHED_KV.items():
        per = kv_cache_bytes_per_token(layers, kv_heads, hd, e)
        rows.append([name, layers, f"{kv_heads}/{heads}", hd, per / 2**10, per * tokens * batch_size / GB])
    return Table(["model", "layers", "kv/q heads", "head dim", "KiB/token", f"GB, {tokens} tokens"], rows,
                 {"KiB/token": ",.0f", f"GB, {tokens} tokens": ".2f"},
                 f"KV cache, 2 bytes per element, batch {batch_size}")


def cnn_rnn_table(batch_size: int = 4) -> Table:
    """`SmallCNN` and `ElmanRNN`: activation bytes kept at the end of a training forward, closed form by
    tensor and measured by the tracker."""
    from labkit.memory import inference as I

    cnn, rnn = I.SmallCNN(), I.ElmanRNN()
    g = torch.Generator().manual_seed(0)
    steps = 12
    x_cnn = torch.randn(batch_size, 3, cnn.size, cnn.size, generator=g)
    x_rnn = torch.randn(batch_size, steps, 8, generator=g)
    rows = []
    for name, model, x, form in (
            ("CNN", cnn, x_cnn, I.cnn_activation_bytes(batch_size, cnn.c1, cnn.c2, cnn.size, cnn.classes)),
            ("RNN", rnn, x_rnn, I.rnn_activation_bytes(batch_size, steps, 8, rnn.hidden, 10))):
        for part, nbytes in form.items():
            if part != "total":
                rows.append([name, part, nbytes, ""])
        rows.append([name, "total", form["total"], I.measure_training_forward(model, x)])
    return Table(["model", "tensor kept for backward", "closed form", "measured"], rows,
                 title=f"batch {batch_size}: CNN 3x{cnn.size}x{cnn.size}, c1={cnn.c1}, c2={cnn.c2}; "
                       f"RNN T={steps}, I=8, H={rnn.hidden} (bytes)")


def peak_picture(fn):
    """The learner's `forward_only_peak` on `CHAINS`' activations, next to the measured peak."""
    from labkit.memory import inference as I

    rows = []
    for widths, b in CHAINS:
        sizes = I._activation_bytes(widths, b, 4)
        yours, measured = fn(sizes), I.chain_peaks(widths, b)["inference_peak"]
        rows.append([" ".join(map(str, widths)), b, yours, measured, yours == measured])
    table = Table(["widths", "B", "yours", "measured", "equal"], rows)
    print(table)
    return table


def kv_picture(fn):
    """The learner's `kv_cache_bytes` against a cache filled while decoding our GPT, and on published shapes."""
    from labkit.memory.inference import PUBLISHED_KV, kv_cache_bytes_per_token, measure_kv_cache

    cfg = GPTConfig(layers=3, hidden=48, heads=4, seq_len=32, vocab=64)
    m = measure_kv_cache(cfg, batch=2, tokens=12)
    rows = [["our GPT, 12 tokens x 2", fn(3, 4, 4, 12, 12, 2, 4), m.held[-1]]]
    for name, (layers, heads, kv, hd, e) in PUBLISHED_KV.items():
        rows.append([name.split(" (")[0] + ", 1 token", fn(layers, heads, kv, hd, 1, 1, e),
                     kv_cache_bytes_per_token(layers, kv, hd, e)])
    for r in rows:
        r.append(r[1] == r[2])
    table = Table(["case", "yours", "measured / closed form", "equal"], rows)
    print(table)
    return table


def wall_table(models=None) -> Table:
    """The memory wall (`labkit.memory.wall`): each published model's parameters, its model states
    at 16 bytes per parameter, the largest device of its year and how many of them the states fill."""
    from labkit.memory.wall import MODELS, wall_rows

    rows = wall_rows(MODELS if models is None else models)
    return Table(["year", "model", "params (B)", "states (GB)", "largest device", "GB", "devices"],
                 [(r.model.year, r.model.name, r.model.params / 1e9, r.state_bytes / GB, r.device.name,
                   r.device.gb, r.devices) for r in rows],
                 formats={"params (B)": ",.2f", "states (GB)": ",.0f", "GB": "g"})


def wall_player():
    """Play + slider over the years: the models published so far against the largest device memory."""
    from labkit.memory.wall import DEVICES, largest_device, wall_rows
    from labkit.viz.memory import wall_figure
    from labkit.viz.player import player

    rows = wall_rows()
    first, last = min(d.year for d in DEVICES), max(r.model.year for r in rows)
    envelope = [(y, largest_device(y).gb) for y in range(first, last + 1)]
    years = list(range(min(r.model.year for r in rows), last + 1))
    return player(lambda i: wall_figure(rows, envelope, years[i]), len(years), description="year",
                  interval_ms=900)
