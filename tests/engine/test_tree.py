"""Pure tree logic on hand-built trees (docs/ARCHITECTURE.md §6.3): depths, children, ancestor masks, rerank, re-indexing."""
from __future__ import annotations

import torch

from core.engine import tree

#        0
#      / | \
#     1  2  3
#    / \     \
#   4   5     6
PARENTS = [-1, 0, 0, 0, 1, 1, 3]


def test_depths_and_children():
    assert tree.depths(PARENTS) == [0, 1, 1, 1, 2, 2, 2]
    assert tree.children(PARENTS) == [[1, 2, 3], [4, 5], [], [6], [], [], []]
    assert tree.depths([-1]) == [0] and tree.children([-1]) == [[]]
    chain = [-1, 0, 1, 2, 3]
    assert tree.depths(chain) == [0, 1, 2, 3, 4]


def test_ancestor_mask_is_ancestors_and_self_only():
    m = tree.ancestor_mask(PARENTS)
    assert m.dtype == torch.bool and m.shape == (7, 7)
    expected = {0: {0}, 1: {0, 1}, 2: {0, 2}, 3: {0, 3}, 4: {0, 1, 4}, 5: {0, 1, 5}, 6: {0, 3, 6}}
    for i, row in enumerate(m.tolist()):
        assert {j for j, v in enumerate(row) if v} == expected[i]
    assert not m[4, 5] and not m[5, 4]  # siblings never see each other
    assert torch.equal(tree.ancestor_mask([-1]), torch.ones(1, 1, dtype=torch.bool))
    assert torch.equal(tree.ancestor_mask([-1, 0, 1, 2]), torch.ones(4, 4, dtype=torch.bool).tril())


def test_positions_are_prefix_plus_depth():
    """Tree positions come from depths alone (derived from parents, never carried separately)."""
    prefix = 11
    assert [prefix + d for d in tree.depths(PARENTS)] == [11, 12, 12, 12, 13, 13, 13]
    # the mask row sums minus one are the depths too (EAGLE's tree_position_ids)
    assert (tree.ancestor_mask(PARENTS).sum(1) - 1).tolist() == tree.depths(PARENTS)


def test_select_nodes_top_scores_with_parents():
    scores = [0.0, -0.1, -2.0, -0.5, -0.3, -3.0, -0.6]
    assert tree.select_nodes(PARENTS, scores, 1) == [0]
    assert tree.select_nodes(PARENTS, scores, 3) == [0, 1, 4]
    assert tree.select_nodes(PARENTS, scores, 4) == [0, 1, 3, 4]
    assert tree.select_nodes(PARENTS, scores, 5) == [0, 1, 3, 4, 6]
    assert tree.select_nodes(PARENTS, scores, 7) == list(range(7))
    assert tree.select_nodes(PARENTS, scores, 100) == list(range(7))  # budget above the pool size


def test_select_nodes_keeps_parent_even_when_child_scores_higher():
    """Non-monotone scores (a child better than its parent) must not produce an orphan."""
    scores = [0.0, -5.0, -1.0, -1.5, -0.1, -0.2, -0.3]  # node 1 is poor, its children 4 and 5 are best
    kept = tree.select_nodes(PARENTS, scores, 3)
    assert len(kept) == 3 and all(PARENTS[i] in kept for i in kept[1:])
    assert kept == [0, 2, 3]  # best-first: 1 only becomes worth it together with a child
    kept = tree.select_nodes(PARENTS, scores, 5)
    assert kept == [0, 1, 2, 3, 6] and all(PARENTS[i] in kept for i in kept[1:])


def test_select_nodes_ties_prefer_shallow_then_early():
    scores = [0.0] + [-1.0] * 6  # every node ties
    assert tree.select_nodes(PARENTS, scores, 4) == [0, 1, 2, 3]
    assert tree.select_nodes(PARENTS, scores, 5) == [0, 1, 2, 3, 4]
    # a child tying its parent's sibling: the shallower sibling wins
    scores = [0.0, -1.0, -2.0, -3.0, -2.0, -9.0, -9.0]
    assert tree.select_nodes(PARENTS, scores, 3) == [0, 1, 2]


def test_subtree_parents_reindexes():
    kept = [0, 1, 3, 4, 6]
    assert tree.subtree_parents(PARENTS, kept) == [-1, 0, 0, 1, 2]
    assert tree.subtree_parents(PARENTS, [0]) == [-1]
    sub = tree.subtree_parents(PARENTS, kept)
    assert tree.depths(sub) == [tree.depths(PARENTS)[i] for i in kept]


def test_top_frontier():
    scores = [0.0, -1.0, -0.5, -0.5, -3.0]
    assert tree.top_frontier([1, 2, 3, 4], scores, 2) == [2, 3]  # tie: earlier first
    assert tree.top_frontier([4, 3, 2, 1], scores, 3) == [2, 3, 1]
    assert tree.top_frontier([1, 2], scores, 5) == [2, 1]
