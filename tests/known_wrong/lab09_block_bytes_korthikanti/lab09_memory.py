"""Known-wrong: the paper's 34·s·b·h + 5·a·s²·b (16-bit, with dropout) used for a model without dropout."""


def block_activation_bytes(batch, seq, hidden, heads, mlp_ratio, itemsize, recompute="none"):
    sbh = seq * batch * hidden * itemsize / 2
    if recompute == "full":
        return int(2 * sbh)
    attention = 0 if recompute == "selective" else 5 * heads * seq * seq * batch * itemsize / 2
    return int(34 * sbh + attention)
