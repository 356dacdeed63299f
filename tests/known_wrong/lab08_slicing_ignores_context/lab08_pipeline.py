"""Known wrong: prices every slice as if it started the sequence, cost(k, 0): the later slices' longer
attention prefix is forgotten, so the DP cuts where the real times are not what it believed."""


def optimal_slicing(seq_len, num_stages, cost):
    L, K = seq_len, num_stages
    best = None
    for t_max in sorted({cost(k, 0) for k in range(1, L + 1)}):
        S, last = [0] + [None] * L, [0] * (L + 1)
        for i in range(1, L + 1):
            for k in range(1, i + 1):
                tk = cost(k, 0)
                if tk <= t_max and S[i - k] is not None and (S[i] is None or S[i - k] + tk < S[i]):
                    S[i], last[i] = S[i - k] + tk, k
        if S[L] is None:
            continue
        slices, i = [], L
        while i:
            slices.append(last[i])
            i -= last[i]
        times, c = [], 0
        for k in slices[::-1]:
            times.append(cost(k, c))
            c += k
        total = sum(times) + (K - 1) * max(times)
        if best is None or total < best[0]:
            best = (total, slices[::-1])
    return best
