"""Context lookup (core/lookup.py) and grafting its chain into the draft tree (core/tree.py `graft`): pure, no model."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core import tree
from core.lookup import context_draft


def test_longest_suffix_latest_occurrence():
    #          0  1  2  3  4  5  6  7  8  9 10 11
    history = [5, 6, 7, 1, 5, 6, 8, 2, 9, 5, 6, 7]
    # suffix (5, 6, 7) occurred at 0 -> tokens after it: 1, 5, 6, ...
    assert context_draft(history, 3) == [1, 5, 6]
    # only a 2-gram matches: (9, 5, 6) never occurred, (5, 6) latest at 4 -> 8, 2
    assert context_draft([5, 6, 8, 2, 9, 5, 6], 2) == [8, 2]
    assert context_draft([5, 6, 8, 2, 9, 5, 6], 2, max_ngram=1, min_ngram=1) == [8, 2]  # token 6 latest at 1


def test_no_match_and_limits():
    assert context_draft([1, 2, 3, 4], 5) == []  # nothing repeats
    assert context_draft([1, 2, 1], 5, min_ngram=2) == []  # single-token matches ignored
    assert context_draft([1, 2, 1], 5, min_ngram=1) == [2, 1]  # follow may run into the suffix itself
    assert context_draft([1, 2, 1, 2], 0) == []
    assert context_draft([], 4) == []
    assert context_draft([7], 4) == []


def test_follow_is_clipped_to_history_and_max_len():
    history = [1, 2, 3, 4, 5, 6, 1, 2]
    assert context_draft(history, 3) == [3, 4, 5]
    assert context_draft(history, 50) == [3, 4, 5, 6, 1, 2]


def test_graft_follows_matching_children_then_appends():
    parents, tokens = [-1, 0, 0, 1], [10, 20, 21, 30]  # root -> 20 -> 30, root -> 21
    p2, t2, n = tree.graft(parents, tokens, [20, 31, 40])
    assert n == 4
    assert p2 == [-1, 0, 0, 1, 1, 4] and t2 == [10, 20, 21, 30, 31, 40]  # shares node 1, branches off at 20
    assert tree.graft(parents, tokens, [20, 30]) == (parents, tokens, 4)  # fully inside the tree: nothing added
    assert tree.graft(parents, tokens, []) == (parents, tokens, 4)
    p3, t3, _ = tree.graft([-1], [10], [1, 1, 1])
    assert p3 == [-1, 0, 1, 2] and t3 == [10, 1, 1, 1]  # repeated tokens along a path are fine


@st.composite
def tree_and_chain(draw):
    n = draw(st.integers(1, 25))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = [draw(st.integers(0, 5)) for _ in range(n)]
    # siblings must be distinct tokens, as the draft tree guarantees
    seen: set[tuple[int, int]] = set()
    for i in range(1, n):
        while (parents[i], tokens[i]) in seen:
            tokens[i] += 6
        seen.add((parents[i], tokens[i]))
    chain = draw(st.lists(st.integers(0, 8), max_size=12))
    return parents, tokens, chain


@settings(max_examples=150, deadline=None, database=None, derandomize=True)
@given(tree_and_chain())
def test_graft_keeps_a_valid_tree_that_contains_the_chain(case):
    parents, tokens, chain = case
    p2, t2, n = tree.graft(parents, tokens, chain)
    assert p2[:n] == parents and t2[:n] == tokens and n == len(parents)
    assert all(0 <= p2[i] < i for i in range(1, len(p2)))  # topological order kept
    kids = tree.children(p2)
    for k in kids:  # siblings distinct
        assert len({t2[c] for c in k}) == len(k)
    at = 0  # the chain is a root path
    for tok in chain:
        at = next(c for c in kids[at] if t2[c] == tok)
    assert len(p2) - n <= len(chain)
