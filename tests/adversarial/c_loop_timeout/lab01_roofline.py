# Attack (or accident): a loop inside C that never checks for signals.
def matmul_intensity(M, K, N, dtype_bytes=4):
    return sum(range(10 ** 13))
