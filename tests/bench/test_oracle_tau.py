"""scripts/probes/oracle_tau.py's tree arithmetic: the best tree of N nodes for a perfect drafter, checked against brute
force over every tree that fits, and the chain's expected accepts in closed form."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from conftest import load_script

oracle = load_script("probes/oracle_tau")


def brute_force(levels: list[list[float]], total: int, top_k: int) -> float:
    """Max over every prefix-closed set of at most `total` nodes (paths of sibling ranks) of the summed reach."""
    nodes = [p for d in range(1, len(levels) + 1) for p in itertools.product(range(top_k), repeat=d)]
    reach = {p: math.prod(levels[i][r] for i, r in enumerate(p)) for p in nodes}
    best = 0.0
    for n in range(1, total + 1):
        for subset in itertools.combinations(nodes, n):
            s = set(subset)
            if all(p[:-1] in s or len(p) == 1 for p in s):  # every node's parent is in the tree (or is the root)
                best = max(best, sum(reach[p] for p in s))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_best_tree_matches_brute_force_over_every_small_tree(seed):
    rng = random.Random(seed)
    levels = []
    for _ in range(3):
        w = sorted((rng.random() for _ in range(3)), reverse=True)
        z = sum(w) + rng.random()  # probabilities of the top 3 tokens, the rest of the mass elsewhere
        levels.append([x / z for x in w])
    for total in (1, 3, 5):
        assert oracle.best_tree_accepts(levels, total, 2) == pytest.approx(brute_force(levels, total, 2))


def test_certain_tokens_fill_a_chain_and_a_flat_distribution_spreads_the_tree():
    assert oracle.best_tree_accepts([[1.0, 0.0]] * 6, 16, 8) == pytest.approx(6.0)  # τ 7: depth + the bonus token
    assert oracle.chain_accepts([1.0] * 6) == pytest.approx(6.0)
    flat = [[0.25] * 4] * 3  # four equally likely tokens at every level
    # the best 4 nodes are the 4 first-level ones (0.25 each) rather than any deeper node (0.0625)
    assert oracle.best_tree_accepts(flat, 4, 8) == pytest.approx(1.0)
    assert oracle.best_tree_accepts(flat, 5, 8) == pytest.approx(1.0625)
    assert oracle.chain_accepts([0.5, 0.5, 0.5]) == pytest.approx(0.5 + 0.25 + 0.125)
    assert oracle.best_tree_accepts([], 16, 8) == 0.0


def test_the_command_line_refuses_a_zero_temperature():
    with pytest.raises(SystemExit):
        oracle.parse(["--shards", "x", "--temperature", "0"])
