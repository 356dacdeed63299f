"""Known wrong: 1F1B with one warm-up forward too few, then backward first - the last rank
starts with the backward of a microbatch it has not forwarded (a dependency violation)."""
from solutions.lab08_pipeline import *  # noqa: F401,F403
from labkit.pipeline.schedules import Action


def schedule_1f1b(num_ranks, num_microbatches):
    p, m = num_ranks, num_microbatches
    if m < p:
        raise ValueError("1F1B needs num_microbatches >= num_ranks")
    out = {}
    for r in range(p):
        warmup = min(m, p - 1 - r)  # off by one
        acts = [Action(r, "F", i) for i in range(warmup)]
        f = warmup
        for b in range(m):
            acts.append(Action(r, "B", b))
            if f < m:
                acts.append(Action(r, "F", f))
                f += 1
        out[r] = acts
    return out
