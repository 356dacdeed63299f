"""labkit.memory.policy: the knapsack answer against every subset, and the cost model against
what PyTorch's selective activation checkpointing keeps and recomputes."""
import random

import pytest

from labkit.memory.policy import (best_by_brute_force, chain_tensors, checkpoint_policy, measure_chain_policy,
                                  recomputed)


def test_policy_is_optimal_and_fits_on_random_cases():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(0, 9)
        sizes = [rng.randint(0, 60) for _ in range(n)]
        costs = [rng.randint(0, 90) for _ in range(n)]
        budget = rng.randint(0, sum(sizes) + 5)
        keep = checkpoint_policy(sizes, costs, budget)
        assert keep == sorted(set(keep)) and sum(sizes[i] for i in keep) <= budget
        assert recomputed(costs, keep) == best_by_brute_force(sizes, costs, budget)[0]


def test_brute_force_small_case_by_hand():
    # keeping the two small tensors (3 + 4 = 7 B) avoids 5 + 6 FLOPs; the big one alone avoids 10
    assert best_by_brute_force([3, 4, 7], [5, 6, 10], 7) == (10, [0, 1])
    assert best_by_brute_force([3, 4, 7], [5, 6, 10], 0) == (21, [])


def test_chain_tensors_units():
    assert chain_tensors([2, 3, 5], 4) == ([4 * 3 * 4, 4 * 5 * 4], [2 * 4 * 2 * 3, 2 * 4 * 3 * 5])


@pytest.mark.parametrize("keep", [[], [1], [0, 2], [0, 1, 2, 3]])
def test_selective_checkpointing_keeps_and_recomputes_the_sums(keep):
    widths = [8, 24, 4, 16, 12]
    sizes, costs = chain_tensors(widths, 4)
    run = measure_chain_policy(widths, 4, keep)
    assert run.kept_bytes == sum(sizes[i] for i in keep)
    assert run.extra_flops == recomputed(costs, keep)
    assert run.exact


@pytest.mark.parametrize("args, message", [
    (([1, 2], [1], 3), "one entry per tensor"),
    (([1, -2], [1, 1], 3), "sizes[1]"),
    (([1, 2], [1, 1], -1), "budget"),
    (([1.5], [1], 3), "sizes[0]"),
])
def test_bad_arguments_get_one_line_errors(args, message):
    with pytest.raises((ValueError, TypeError), match=message.replace("[", r"\[").replace("]", r"\]")):
        checkpoint_policy(*args)
