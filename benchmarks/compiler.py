"""torch.compile (Inductor) vs eager on this machine, recompiles vs shapes, and autotuning search.

1. Eager vs ``torch.compile`` (default backend, Inductor) on three small workloads, inference
   (``torch.no_grad``): a fused elementwise chain, a small MLP, and ``labkit.model.GPT``'s forward.
   Compile time = wall time of the first compiled call minus one eager call. Steady times are
   `labkit.bench.median_time`, eager and compiled alternating over a few rounds, best round kept
   (a burst of load from other processes then hits one round, not the comparison). Inductor's
   on-disk FX graph cache is switched off, so compile times are real compiles.
   Then Lab 13's fx fusion pass on a nine-op elementwise chain, with an eager and a compiled body.
2. Compiles as shapes vary (cheap counting backend, exact): 12 lengths under each Dynamo setting.
3. 30 random sequence lengths through Inductor: static shapes, automatic dynamic shapes (the
   default), dynamic=True, and power-of-two bucketing, against eager.
4. Autotuning tile sizes of Lab 03's blocked matmul (rectangular BM x BN x BK tiles, n = 256,
   one thread): every configuration is measured once; exhaustive, random and model-guided (ridge
   cost model) searches replay those times, averaged over seeds.
5. On a GPU only: the same searches over Lab 04's Triton matmul configurations, and CUDA graphs.

    .venv/bin/python benchmarks/compiler.py [--quick]

Writes benchmarks/results/compiler.md.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# A fresh Inductor cache directory: compile times below are real compiles (C++ included), not
# hits in kernels an earlier run left on disk. Set before torch is imported; removed at the end.
_CACHE = tempfile.mkdtemp(prefix="inductor_bench_")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE

import torch  # noqa: E402
from torch import nn  # noqa: E402

from labkit.bench import markdown_table, median_time, write_results  # noqa: E402
from labkit.compiler import autotune as at  # noqa: E402
from labkit.compiler import cuda_graphs  # noqa: E402
from labkit.compiler import inside_compile as ic  # noqa: E402
from labkit.model import GPT, GPTConfig, batch  # noqa: E402


def _workloads(quick: bool):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1 << (18 if quick else 20), generator=g)
    mlp = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).eval()
    xm = torch.randn(64, 256, generator=g)
    cfg = GPTConfig(layers=2, hidden=128, heads=4, seq_len=64, vocab=256)
    gpt = GPT(cfg, seed=0).eval()
    tokens, _ = batch(cfg, 8, seed=1)
    return [
        ("elementwise chain (5 ops)", f"x: {x.numel():,} floats", ic.elementwise_chain, (x,)),
        ("MLP 256-1024-256, GELU", "batch 64", mlp, (xm,)),
        ("labkit.model.GPT forward", f"{cfg.layers} layers, h={cfg.hidden}, 8x{cfg.seq_len} tokens",
         lambda t: gpt(t)[0], (tokens,)),
    ]


def eager_vs_compiled(quick: bool, rounds: int = 5):
    rows = []
    with torch.no_grad():
        for name, shape, fn, args in _workloads(quick):
            torch._dynamo.reset()
            compiled = torch.compile(fn)
            t0 = time.perf_counter()
            eager_out = fn(*args)
            one_eager = time.perf_counter() - t0
            t0 = time.perf_counter()
            comp_out = compiled(*args)
            first = time.perf_counter() - t0
            err = float((comp_out - eager_out).abs().max())
            best = {"eager": float("inf"), "compiled": float("inf")}
            for _ in range(rounds):
                for key, f in (("eager", fn), ("compiled", compiled)):
                    s = median_time(lambda: f(*args), repeat=7, warmup=1, min_time_s=0.02)
                    best[key] = min(best[key], s)
            brk = ic.graph_breaks(fn, *args)
            rows.append([name, shape, f"{brk.graphs} ({brk.breaks})", best["eager"] * 1e3,
                         best["compiled"] * 1e3, best["eager"] / best["compiled"], first - one_eager,
                         f"{err:.1e}"])
            print(*rows[-1], flush=True)
            torch._dynamo.reset()
    return rows


class _NineOpChain(nn.Module):
    """Nine cheap elementwise ops: unfused, nine passes over memory; fused and compiled, one."""

    def forward(self, x, y):
        a = torch.relu(x * y + 1.0) * 2.0 - x
        return (a.abs() + 0.5) * y - 3.0


def fusion_pass(quick: bool):
    """Lab 13's fx fusion pass (`fx_passes.fuse_elementwise`) on `_NineOpChain`: the unfused graph vs
    the fused group with an eager body and with an Inductor-compiled body (`fx_measure.measure_pass`:
    medians, the lower of alternating rounds)."""
    from labkit.compiler.fx_measure import measure_pass
    from labkit.compiler.fx_passes import fuse_elementwise

    g = torch.Generator().manual_seed(1)
    rows = []
    for n in ((1 << 16, 1 << 19) if quick else (1 << 16, 1 << 19, 1 << 22)):
        x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
        for body, fn in (("eager", fuse_elementwise), ("compiled", lambda gm: fuse_elementwise(gm, compile=True))):
            m = measure_pass(_NineOpChain(), fn, (x, y))
            rows.append([f"{n:,}", body, f"{m.launches_before} -> {m.launches_after}", m.seconds_before * 1e3,
                         m.seconds_after * 1e3, m.speedup, f"{m.max_abs_diff:.1e}"])
            print(*rows[-1], flush=True)
    return rows


def compile_counts():
    xs = [(torch.randn(n),) for n in range(4, 16)]
    cases = [("default (automatic_dynamic_shapes=True)", dict(dynamic=None)),
             ("automatic_dynamic_shapes=False, recompile_limit=64", dict(automatic_dynamic=False, recompile_limit=64)),
             ("dynamic=False (recompile_limit=8, the default)", dict(dynamic=False)),
             ("dynamic=False, recompile_limit=64", dict(dynamic=False, recompile_limit=64)),
             ("dynamic=True", dict(dynamic=True))]
    rows = []
    for name, kw in cases:
        st = ic.count_compiles(ic.elementwise_chain, xs, **kw)
        rows.append([name, st.compiles, st.dynamic_graphs, ",".join(map(str, st.compiled_at))])
    return rows


def bucketing(quick: bool):
    rng = random.Random(0)
    lengths = [rng.randint(2, 300) for _ in range(12 if quick else 30)]
    res = ic.bucketing_experiment(lengths, features=64, backend="inductor", repeat=5, rounds=3)
    eager = next(r for r in res if r.policy == "eager")
    rows = [[r.policy, r.compiles, r.first_pass_s, r.steady_s * 1e3, eager.steady_s / r.steady_s,
             f"{r.max_error:.1e}"] for r in res]
    for r in rows:
        print(*r, flush=True)
    return lengths, rows


def autotuning(quick: bool):
    space = at.blocked_space()
    seeds = range(20)
    budget = 40
    t0 = time.perf_counter()
    res = at.compare(space, at.blocked_measure(n=256, threads=1, repeat=3, min_time_s=0.01), budget, seeds)
    took = time.perf_counter() - t0
    marks = (5, 10, 20, 30, 40)
    rows = []
    for m in at.METHODS:
        frac, mean = res["within"][m][5]
        rows.append([m] + [f"{res['curves'][m][k - 1]:.3f}" for k in marks] +
                    [f"{frac:.0%}", "-" if mean is None else f"{mean:.1f}"])
    # how well a model fitted on 30 measured configurations ranks the other 95 (held out)
    cfgs = space.configs()
    times = [res["table"][tuple(c[k] for k in space.names)] for c in cfgs]
    rhos = []
    for s in seeds:
        idx = torch.randperm(len(cfgs), generator=torch.Generator().manual_seed(s)).tolist()
        tr, te = idx[:30], idx[30:]
        model = at.RidgeCostModel(space).fit([cfgs[i] for i in tr], [times[i] for i in tr])
        rhos.append(at.spearman(model.predict([cfgs[i] for i in te]), [times[i] for i in te]))
    slowest = max(res["table"].values())
    return res, rows, marks, sum(rhos) / len(rhos), took, slowest


def inductor_startup() -> float:
    """Time-real-compiles settings (no FX graph cache, one thread), then Inductor's one-time start-up
    (C++ headers, imports) paid on a throwaway compile, charged to no row: its seconds."""
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = False          # time real compiles, not cache hits
    torch.set_num_threads(1)       # one thread: steadier on a shared machine; Inductor's kernels too
    t0 = time.perf_counter()
    torch._dynamo.reset()
    torch.compile(lambda x: torch.cos(x) + 1)(torch.randn(8))
    torch._dynamo.reset()
    return time.perf_counter() - t0


def triton_note() -> str:
    """The Triton matmul configurations searched on a CUDA GPU; one line saying why not elsewhere."""
    if not (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"):
        return "Triton matmul configurations: not searched (needs a CUDA GPU; the interpreter's times mean nothing)."
    tri = at.compare(at.triton_space(), at.triton_measure(n=2048), 30, range(10))
    c = tri["curves"]
    return (f"Triton matmul (Lab 04, fp16, n = 2048), {len(at.triton_space())} configurations: fastest "
            f"{tri['best_config']} at {tri['optimum'] * 1e3:.3f} ms; best/optimum after 10 and 30 "
            f"evaluations: random {c['random'][9]:.3f}, {c['random'][29]:.3f}; model "
            f"{c['model'][9]:.3f}, {c['model'][29]:.3f} (mean of 10 seeds).")


def graphs_note() -> str:
    """CUDA graphs against eager launches where a GPU is; one line saying why not elsewhere."""
    if not cuda_graphs.available():
        return "CUDA graphs: not measured (" + cuda_graphs.GPU_MESSAGE + ")."
    r = cuda_graphs.measure()
    return (f"CUDA graphs: {r.kernels} small kernels, eager {r.eager_us_per_kernel:.1f} us/kernel, "
            f"replayed graph {r.graph_us_per_kernel:.1f} us/kernel ({r.speedup:.1f}x).")


def notes_text(startup, load, fusion_rows, counts, lengths, bucket_rows, res, tune_rows, marks, rho, tune_s,
               slowest, triton_line, graphs_line, total) -> str:
    best = res["best_config"]
    pad = sum(ic.next_pow2(n) for n in lengths) / sum(lengths) - 1
    static_compiles = next(r[1] for r in bucket_rows if r[0] == "static")
    compiled_lengths = set(list(dict.fromkeys(lengths))[:static_compiles])   # first distinct ones
    eager_calls = sum(n not in compiled_lengths for n in lengths)
    return f"""
Inference (`torch.no_grad`), float32, {torch.get_num_threads()} torch thread (eager and Inductor's
kernels alike), on a shared 2-core machine (1-minute load average {load:.1f} at the end: timings
carry noise from other processes). speed-up = eager / compiled (median of 7, best of 5 alternating
rounds); compile s = first compiled call minus one eager call, in a fresh Inductor cache with the
FX graph cache off, after a one-time Inductor start-up of {startup:.1f} s (a first, unrelated compile,
not charged to any row). max |diff| = compiled vs eager. The MLP and GPT spend most of their time
in matmuls, which Inductor hands to the same BLAS library eager mode uses; what it can fuse is
the elementwise work around them. graphs (breaks) = `torch._dynamo.explain`: the GPT's forward
validates its tokens with `int(t.min())` and `int(t.max())` (labkit/model.py, `check_tokens`):
tensor-to-Python-number conversions that break the graph, so the forward runs as several compiled
graphs with Python in between.

## Lab 13's fusion pass: nine elementwise ops on x, y (float32, n elements each)

{markdown_table(["n", "fused body", "launches", "unfused ms", "fused ms", "speed-up", "max |diff|"],
                fusion_rows)}

Fusing alone turns nine graph nodes into one, but an eager body still runs the nine ops (nine
launches as torch.profiler counts them, nine passes over memory, each intermediate allocated), and
the one custom op costs a little on top: no gain.
Compiled, the body is one generated loop that reads x and y once and writes once; the gain grows
with n as memory traffic comes to dominate the per-call overheads.

## Compiles as the input length varies (12 lengths, 4..15; counting backend, exact)

{markdown_table(["setting", "compiles", "graphs with a symbolic size", "at calls"], counts)}

The default compiles twice: static for the first length, then (a size guard failed) once more with
the length symbolic; every later length reuses that graph. Saying that "torch.compile requires
static shapes" is a common mistake: one compiled graph served 11 different lengths here.

## {len(lengths)} random lengths (2..300) x 64 features through Inductor

Lengths: {lengths}. Buckets: {sorted({ic.next_pow2(n) for n in lengths})}, bound
ceil(log2(max)) + 1 = {ic.bucket_bound(lengths)}.

{markdown_table(["policy", "compiles", "first pass s (compiles included)", "steady ms per pass",
                 "eager / policy (steady)", "max |diff|"], bucket_rows)}

static = `dynamic=False`: one compile per new length until recompile_limit (8), then Dynamo runs
new lengths eagerly. bucketed = `dynamic=False` on inputs zero-padded to the next power of two with
a mask tensor (`inside_compile.bucketed_call`), output sliced back: static kernels, a bounded
number of compiles, at the price of computing the padding. dynamic=True makes every size symbolic
(the 64 features and the mask's length too); the automatic policy makes only the length symbolic,
because only the length ever failed a guard. Bucketing computes {pad:.0%} more rows than the
lengths need. Under static, {eager_calls} of the {len(lengths)} calls ran eagerly once the limit was
reached (lengths not among the {static_compiles} compiled ones), each after Dynamo's guard checks
failed. Steady times are a few milliseconds per pass of {len(lengths)} calls, where per-call
overheads (guards, padding, Python) weigh as much as the arithmetic.

## Autotuning tile sizes of Lab 03's blocked matmul (n = 256, float32, 1 thread)

125 configurations (BM, BN, BK in 16..256), each measured once (median_time, {tune_s:.0f} s in all);
fastest {best} at {res['optimum'] * 1e3:.3f} ms, slowest {slowest * 1e3:.1f} ms. The searches replay
those times (so every method sees identical numbers); entries are best-found / optimum after k
evaluations, mean of 20 seeds; exhaustive sweeps in a fixed order.

{markdown_table(["method"] + [f"k={k}" for k in marks] + ["seeds within 5% by k=40",
                 "mean evaluations to 5%"], tune_rows)}

A ridge model fitted on 30 measured configurations ranks the other 95 with mean Spearman
rho = {rho:.2f} (20 splits). Here every tile product is a BLAS call, so time is mostly set by the
number of calls and large tiles win; the search problem is small but real.

{triton_line}

{graphs_line}

Whole script: {total:.0f} s.
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller inputs, fewer lengths")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    t_start = time.perf_counter()
    startup = inductor_startup()
    rows = eager_vs_compiled(a.quick)
    fusion_rows = fusion_pass(a.quick)
    counts = compile_counts()
    lengths, bucket_rows = bucketing(a.quick)
    res, tune_rows, marks, rho, tune_s, slowest = autotuning(a.quick)
    triton, graphs = triton_note(), graphs_note()
    total = time.perf_counter() - t_start
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    shutil.rmtree(_CACHE, ignore_errors=True)
    notes = notes_text(startup, load, fusion_rows, counts, lengths, bucket_rows, res, tune_rows, marks, rho,
                       tune_s, slowest, triton, graphs, total)
    path = write_results(
        "compiler", "torch.compile (Inductor) vs eager; recompiles; autotuning search",
        ["workload", "input", "graphs (breaks)", "eager ms", "compiled ms", "speed-up", "compile s",
         "max |diff|"], rows, notes,
        ran_on="cpu" + (" (the Triton and CUDA-graph sections: cuda)" if torch.cuda.is_available() else ""))
    print(path.read_text())


if __name__ == "__main__":
    main()
