"""Known wrong: minimises the total work Σ t_j alone, forgetting the (K - 1)·max t_j of filling the
pipeline: the least work is usually the whole sequence as one slice, which pipelines nothing."""


def optimal_slicing(seq_len, num_stages, cost):
    L, K = seq_len, num_stages
    S, last = [0] + [None] * L, [0] * (L + 1)
    for i in range(1, L + 1):
        for k in range(1, i + 1):
            tk = cost(k, i - k)
            if S[i] is None or S[i - k] + tk < S[i]:
                S[i], last[i] = S[i - k] + tk, k
    slices, i = [], L
    while i:
        slices.append(last[i])
        i -= last[i]
    slices = slices[::-1]
    times, c = [], 0
    for k in slices:
        times.append(cost(k, c))
        c += k
    return sum(times) + (K - 1) * max(times), slices
