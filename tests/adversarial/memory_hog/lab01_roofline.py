# Attack (or accident): touch 3 GiB of memory.
def attainable_flops(intensity, peak_flops, bandwidth):
    block = b"x" * (3 << 30)
    return float(len(block))
