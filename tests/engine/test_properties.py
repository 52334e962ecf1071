"""Property tests (hypothesis) for the pure tree and acceptance logic: random parent/score tables and random target
distributions, including score ties and zero-probability tokens."""
from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core.engine import tree
from core.engine.verify import accept_greedy, accept_sampled

SETTINGS = settings(max_examples=150, deadline=None, database=None, derandomize=True)  # reproducible in CI


@st.composite
def trees(draw, max_nodes: int = 40):
    """(parents, scores): parents[i] < i; scores drawn from a small set so ties are common."""
    n = draw(st.integers(1, max_nodes))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    scores = [0.0] + [draw(st.sampled_from([-0.5, -1.0, -1.5, -2.0, -3.0, -7.25])) for _ in range(1, n)]
    return parents, scores


@SETTINGS
@given(trees(), st.integers(1, 50))
def test_select_nodes_connected_in_range_within_budget(t, budget):
    parents, scores = t
    kept = tree.select_nodes(parents, scores, budget)
    assert kept[0] == 0 and kept == sorted(set(kept))
    assert len(kept) == min(budget, len(parents))
    assert all(0 <= i < len(parents) for i in kept)
    assert all(parents[i] in kept for i in kept[1:])  # never disconnected
    sub = tree.subtree_parents(parents, kept)
    assert sub[0] == -1 and all(0 <= p < i for i, p in enumerate(sub) if i)
    assert tree.depths(sub) == [tree.depths(parents)[i] for i in kept]


@SETTINGS
@given(trees(), st.integers(1, 50))
def test_select_nodes_is_global_top_n_for_monotone_scores(t, budget):
    """With EAGLE-2 scores (a child never beats its parent) the rerank is the paper's global top-N."""
    parents, raw = t
    scores = [0.0] * len(parents)
    for i in range(1, len(parents)):
        scores[i] = scores[parents[i]] + raw[i]  # cumulative log-probs: monotone along every path
    kept = tree.select_nodes(parents, scores, budget)
    chosen = sorted((scores[i] for i in kept[1:]), reverse=True)
    best = sorted(scores[1:], reverse=True)[: len(kept) - 1]
    assert chosen == best


@SETTINGS
@given(trees())
def test_ancestor_mask_matches_parent_walk(t):
    parents, _ = t
    m = tree.ancestor_mask(parents)
    for i in range(len(parents)):
        anc, j = set(), i
        while j != -1:
            anc.add(j)
            j = parents[j]
        assert {j for j, v in enumerate(m[i].tolist()) if v} == anc


@st.composite
def verify_cases(draw):
    parents, _ = draw(trees(max_nodes=15))
    v = draw(st.integers(2, 12))
    tokens = [draw(st.integers(0, v - 1)) for _ in parents]  # sibling duplicates allowed
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    probs = torch.rand(len(parents), v, generator=g) ** 4
    probs[torch.rand(len(parents), v, generator=g) < 0.3] = 0.0  # zero-probability tokens (top-p cut)
    probs[torch.arange(len(parents)), torch.randint(0, v, (len(parents),), generator=g)] += 0.01
    return parents, tokens, probs / probs.sum(-1, keepdim=True), seed


def _valid_path(parents: list[int], path: list[int]) -> bool:
    return path[0] == 0 and all(parents[b] == a for a, b in zip(path, path[1:]))


@SETTINGS
@given(verify_cases())
def test_accept_sampled_returns_valid_paths(case):
    parents, tokens, probs, seed = case
    kids = tree.children(parents)
    g = torch.Generator().manual_seed(seed)
    path, bonus = accept_sampled(kids, tokens, lambda n: probs[n].clone(), g)
    assert _valid_path(parents, path)
    assert 0 <= bonus < probs.shape[1]
    for a, b in zip(path, path[1:]):
        assert probs[a, tokens[b]] > 0  # never accepts a token the target rules out
    # the bonus is drawn from the last node's distribution minus the rejected children's tokens
    p = probs[path[-1]].clone()
    for c in kids[path[-1]]:
        p[tokens[c]] = 0.0
    assert p[bonus] > 0


@SETTINGS
@given(verify_cases())
def test_accept_greedy_path_is_maximal_match(case):
    parents, tokens, probs, _ = case
    kids = tree.children(parents)
    argmax = probs.argmax(-1).tolist()
    path, bonus = accept_greedy(kids, tokens, argmax)
    assert _valid_path(parents, path)
    assert all(tokens[b] == argmax[a] for a, b in zip(path, path[1:]))
    assert bonus == argmax[path[-1]]
    assert all(tokens[c] != bonus for c in kids[path[-1]])  # could not go one deeper
