"""Acceptance rules on synthetic targets (docs/ARCHITECTURE.md §6.4): greedy lengths 0 / partial / full + bonus; the sampled
rule reproduces the target distribution exactly (checked here without a model, with a fixed generator)."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from core.engine import tree
from core.engine.verify import accept_greedy, accept_sampled

#        0 (root)
#      /   \
#     1     2
#    / \     \
#   3   4     5
#   |
#   6
PARENTS = [-1, 0, 0, 1, 1, 2, 3]
TOKENS = [99, 10, 11, 12, 13, 14, 15]
KIDS = tree.children(PARENTS)


def argmax_table(**after: int) -> list[int]:
    """Target argmax after each node; unspecified nodes predict 0 (a token no child carries)."""
    table = [0] * len(PARENTS)
    for node, tok in after.items():
        table[int(node[1:])] = tok
    return table


def test_greedy_rejects_everything():
    path, bonus = accept_greedy(KIDS, TOKENS, argmax_table(n0=42))
    assert path == [0] and bonus == 42


def test_greedy_partial_through_second_sibling():
    path, bonus = accept_greedy(KIDS, TOKENS, argmax_table(n0=11, n2=14, n5=7))
    assert path == [0, 2, 5] and bonus == 7
    path, bonus = accept_greedy(KIDS, TOKENS, argmax_table(n0=10, n1=13, n4=3))
    assert path == [0, 1, 4] and bonus == 3


def test_greedy_full_depth_bonus_from_leaf():
    path, bonus = accept_greedy(KIDS, TOKENS, argmax_table(n0=10, n1=12, n3=15, n6=77))
    assert path == [0, 1, 3, 6] and bonus == 77


def test_greedy_stops_at_first_mismatch():
    path, bonus = accept_greedy(KIDS, TOKENS, argmax_table(n0=10, n1=14, n3=15))
    assert path == [0, 1] and bonus == 14


def test_greedy_duplicate_sibling_tokens_take_the_first():
    kids = tree.children([-1, 0, 0])
    path, bonus = accept_greedy(kids, [5, 8, 8], [8, 1, 2])
    assert path == [0, 1] and bonus == 1


def test_sampled_point_masses_are_deterministic():
    g = torch.Generator().manual_seed(0)
    one_hot = lambda tok: torch.nn.functional.one_hot(torch.tensor(tok), 20).float()
    # the target is sure of 10 then 12 then 15 then 4: the full path is accepted, bonus 4
    want = {0: 10, 1: 12, 3: 15, 6: 4, 2: 0, 4: 0, 5: 0}
    for _ in range(20):
        assert accept_sampled(KIDS, TOKENS, lambda n: one_hot(want[n]), g) == ([0, 1, 3, 6], 4)
    # the target never wants any drafted token: nothing accepted, bonus from p
    assert accept_sampled(KIDS, TOKENS, lambda n: one_hot(3), g) == ([0], 3)


def test_sampled_rule_reproduces_target_distribution():
    """First emitted token ~ p(root); given the first accepted node, the next emitted token ~ p(that node).

    The second sibling and the residual path are hit often: p(root) puts 0.3 on child 1's token, 0.25 on child 2's.
    """
    v = 16
    g = torch.Generator().manual_seed(7)
    dists = {n: torch.distributions.Dirichlet(torch.full((v,), 0.5)).sample() for n in range(len(PARENTS))}
    dists[0] = torch.zeros(v)
    dists[0][[10, 11, 3, 4, 5]] = torch.tensor([0.3, 0.25, 0.2, 0.15, 0.1])
    dists[1][[12, 13]] += 0.5
    dists[1] /= dists[1].sum()
    first, second = Counter(), {1: Counter(), 2: Counter()}
    n = 12000
    for _ in range(n):
        path, bonus = accept_sampled(KIDS, TOKENS, lambda node: dists[node].clone(), g)
        out = [TOKENS[i] for i in path[1:]] + [bonus]
        first[out[0]] += 1
        if len(path) > 1:
            second[path[1]][out[1]] += 1
    _assert_matches(first, dists[0], n)
    for node in (1, 2):
        _assert_matches(second[node], dists[node], sum(second[node].values()))


def _assert_matches(counts: Counter, p: torch.Tensor, n: int) -> None:
    """Every token within 4.5 binomial standard deviations of n p(x), and none drawn where p(x) = 0."""
    assert n > 500
    for x in range(len(p)):
        mean, sd = n * float(p[x]), (n * float(p[x]) * (1 - float(p[x]))) ** 0.5
        if p[x] == 0:
            assert counts[x] == 0
        else:
            assert abs(counts[x] - mean) <= 4.5 * sd + 1, (x, counts[x], mean)


def test_sampled_handles_zero_probability_drafts():
    """Drafted tokens outside top-p (p = 0) are rejected without touching the distribution."""
    g = torch.Generator().manual_seed(1)
    p = torch.zeros(20)
    p[5] = 1.0
    for _ in range(10):
        path, bonus = accept_sampled(KIDS, TOKENS, lambda n: p.clone(), g)
        assert path == [0] and bonus == 5
