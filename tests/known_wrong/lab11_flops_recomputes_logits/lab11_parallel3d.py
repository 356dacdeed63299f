"""Known-wrong: full recomputation taken to repeat the logit layer's forward too (4 passes of it,
not 3): 96·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) instead of V/(16·l·h)."""


def flops_per_iteration(layers, hidden, seq_len, vocab, global_batch, recompute):
    s, h, B = seq_len, hidden, global_batch
    passes = 4 if recompute else 3
    return B * passes * (layers * (24 * s * h * h + 4 * s * s * h) + 2 * s * h * vocab)
