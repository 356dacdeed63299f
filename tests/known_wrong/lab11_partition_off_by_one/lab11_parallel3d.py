"""Known-wrong: the first stage's end j stops one short (range(i + 1, n − k + 1)), so a stage is never
allowed to leave exactly k − 1 layers to the k − 1 stages after it."""
import math


def partition_stages(costs, stages):
    n, p = len(costs), stages
    best = [[math.inf] * (n + 1) for _ in range(p + 1)]
    for i in range(n):
        best[1][i] = math.fsum(costs[i:])
    for k in range(2, p + 1):
        for i in range(n - k + 1):
            ends = range(i + 1, n - k + 1)
            best[k][i] = min((max(math.fsum(costs[i:j]), best[k - 1][j]) for j in ends), default=math.inf)
    bottleneck = best[p][0]
    sizes, i = [], 0
    for k in range(p, 1, -1):
        ends = [j for j in range(i + 1, n - k + 1)
                if math.fsum(costs[i:j]) <= bottleneck and best[k - 1][j] <= bottleneck]
        j = max(ends, default=i + 1)
        sizes.append(j - i)
        i = j
    sizes.append(n - i)
    return sizes, bottleneck
