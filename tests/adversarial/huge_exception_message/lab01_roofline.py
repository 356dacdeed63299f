# Attack (or accident): an exception carrying a 50 MB message.
def chain_intensity(num_ops, fused, dtype_bytes=4):
    raise ValueError("z" * 50_000_000)
