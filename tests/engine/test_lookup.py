"""Context lookup (core/engine/lookup.py) and grafting its chain into the draft tree (core/engine/tree.py `graft`): pure, no model."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.engine import tree
from core.engine.lookup import context_draft, copied, copy_with_overlap


def test_longest_suffix_then_longest_continuation():
    #          0  1  2  3  4  5  6  7  8  9 10 11
    history = [5, 6, 7, 1, 5, 6, 8, 2, 9, 5, 6, 7]
    # suffix (5, 6, 7) occurred at 0 -> tokens after it: 1, 5, 6, ...
    assert context_draft(history, 3) == [1, 5, 6]
    # only a 2-gram matches: (9, 5, 6) never occurred, (5, 6) at 0 and 4; both are followed by 2 real tokens, the
    # latest (4) wins
    assert context_draft([5, 6, 8, 2, 9, 5, 6], 2) == [8, 2]
    # with 3 tokens wanted only the occurrence at 0 has 3 real tokens after it (7, 8, 2)
    assert context_draft([5, 6, 7, 8, 2, 9, 5, 6], 3) == [7, 8, 2]
    assert context_draft([5, 6, 8, 2, 9, 5, 6], 2, max_ngram=1, min_ngram=1) == [8, 2]  # token 6 latest at 1


def test_no_match_and_limits():
    assert context_draft([1, 2, 3, 4], 5) == []  # nothing repeats
    assert context_draft([1, 2, 1], 5, min_ngram=2) == []  # single-token matches ignored
    assert context_draft([1, 2, 1], 5, min_ngram=1) == [2, 1, 2, 1, 2]  # the copy runs into itself (overlap)
    assert context_draft([1, 2, 1, 2], 0) == []
    assert context_draft([], 4) == []
    assert context_draft([7], 4) == []


def test_copy_continues_past_the_history_with_overlap():
    history = [1, 2, 3, 4, 5, 6, 1, 2]
    assert context_draft(history, 3) == [3, 4, 5]
    assert context_draft(history, 8) == [3, 4, 5, 6, 1, 2, 3, 4]  # 6 real tokens, then the copy copies itself
    assert copy_with_overlap([9, 4, 5], 1, 5) == [4, 5, 4, 5, 4]
    assert copy_with_overlap([9, 4, 5], 0, 2) == [9, 4]


@pytest.mark.parametrize("lookup", [1, 2, 10, 32])
@pytest.mark.parametrize("run_len", [2, 3, 5, 40])
def test_period_one_run_gives_lookup_tokens(lookup, run_len):
    """Issue 14: in a run of one repeated token ("1111...") the latest occurrence used to leave one token to copy."""
    history = [4, 9, 7] + [1] * run_len
    assert context_draft(history, lookup) == [1] * lookup


@pytest.mark.parametrize("lookup", [1, 4, 10, 32])
@pytest.mark.parametrize("periods", [1, 2, 7])
def test_period_three_run_gives_lookup_tokens(lookup, periods):
    history = [8, 8, 0] + [1, 2, 3] * periods + [1]
    expected = ([2, 3, 1] * lookup)[:lookup]
    assert context_draft(history, lookup) == expected


def reference_draft(history: list[int], max_len: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Brute force, straight from the definition: longest suffix n-gram with an earlier occurrence, the occurrence
    with the most real tokens after it (capped at max_len, latest among equals), copied token by token with
    overlap."""
    if max_len <= 0:
        return []
    for n in range(max_ngram, min_ngram - 1, -1):
        if n >= len(history):
            continue
        suffix = history[len(history) - n:]
        starts = [i for i in range(len(history) - n) if history[i:i + n] == suffix]
        if not starts:
            continue
        best = max(starts, key=lambda i: (min(max_len, len(history) - i - n), i))
        ext = list(history)
        for k in range(max_len):
            ext.append(ext[best + n + k])
        return ext[len(history):]
    return []


@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(st.lists(st.integers(0, 4), max_size=40), st.integers(0, 12), st.integers(1, 4), st.integers(1, 3))
def test_matches_the_brute_force_definition(history, max_len, max_ngram, min_ngram):
    min_ngram = min(min_ngram, max_ngram)
    assert context_draft(history, max_len, max_ngram, min_ngram) == reference_draft(history, max_len, max_ngram,
                                                                                      min_ngram)


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(st.lists(st.integers(10, 30), max_size=20), st.lists(st.integers(0, 9), min_size=1, max_size=6, unique=True),
       st.integers(2, 6), st.integers(0, 5), st.integers(1, 20))
def test_any_loop_continues_for_lookup_tokens(prefix, pattern, reps, cut, lookup):
    """A loop of distinct tokens repeated at least twice continues periodically for exactly `lookup` tokens,
    whatever text came before it (prefix tokens never occur in the loop)."""
    cut = cut % len(pattern)
    history = prefix + pattern * reps + pattern[:cut]
    p = len(pattern)
    expected = [(pattern * (lookup // p + 2))[(cut + k) % p] for k in range(lookup)]
    assert context_draft(history, lookup) == expected


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(st.lists(st.integers(0, 3), max_size=60), st.integers(1, 12))
def test_a_match_always_yields_max_len_tokens_copied_from_the_history(history, max_len):
    out = context_draft(history, max_len, max_ngram=2)
    assert out == [] or len(out) == max_len
    if out:  # the copy is a shifted view of history + out itself
        ext = history + out
        assert any(ext[s:s + max_len] == out for s in range(1, len(history)))


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


def test_copied_counts_the_leading_agreement_with_the_chain():
    assert copied([5, 6, 7], [5, 6, 9, 7]) == 2
    assert copied([5, 6, 7], [5, 6, 7, 8]) == 3
    assert copied([5, 6], [4]) == 0 and copied([], [1, 2]) == 0 and copied([1, 2], []) == 0


def test_the_loop_drafts_with_the_chain_alone_while_a_copy_is_in_progress():
    """A step has head nodes exactly when the previous step copied nothing (or there is no chain), a copy step verifies
    the chain alone at its grown length, and the output stays the baseline's. A tiny random Mistral continues a
    prompt that ends in a run of one token: both kinds of steps occur, and a copy that takes its whole chain makes
    the next chain twice as long."""
    from conftest import PROMPT, run, tiny_head, tiny_target
    from core.engine.baseline import BaselineDecoder
    from core.engine.config import DecodeConfig, TreeConfig
    from core.drafters.eagle import EagleDrafter
    from core.engine.eagle import Eagle2Decoder

    target = tiny_target("mistral")
    prompt = PROMPT + [7] * 12
    cfg = DecodeConfig(60, tree=TreeConfig(8, 3, 3, 2))
    out, events = run(Eagle2Decoder(target, EagleDrafter(tiny_head(target), target)), prompt, cfg)
    assert out == run(BaselineDecoder(target), prompt, cfg)[0]
    history, copying, kinds = list(prompt) + list(events[0].new_token_ids), False, set()
    chain_len, longest = 2, 0  # a copy that takes its whole chain doubles the next one, up to 4 x lookup
    for ev in events[1:]:
        chain = context_draft(history, min(chain_len, max(2, 60 - (len(history) - len(prompt)))))
        head_step = any(n.source == "head" for n in ev.tree)
        assert head_step == (not (chain and copying)), ev.step
        if not head_step:
            assert [n.token_id for n in ev.tree[1:]] == chain, ev.step  # the chain alone, at its grown length
            longest = max(longest, len(chain))
        kinds.add(head_step)
        n_copied = copied(chain, ev.new_token_ids[:-1])
        copying = n_copied > 0
        chain_len = min(2 * chain_len, cfg.tree.copy_lookup) if chain and n_copied == len(chain) else 2
        history += ev.new_token_ids
    assert kinds == {True, False}
    assert longest > 2  # a grown chain was verified


def test_the_head_reads_every_accepted_token_before_it_proposes():
    """Copy steps run no head pass: their accepted features wait and the next proposal reads them in one commit.
    At every proposal the head's cache covers exactly the committed text (pair convention: history - 1 pairs), a
    copy step commits nothing, and the output stays the baseline's."""
    from conftest import PROMPT, run, tiny_head, tiny_target
    from core.engine.baseline import BaselineDecoder
    from core.engine.config import DecodeConfig, TreeConfig
    from core.drafters.eagle import EagleDrafter
    from core.engine.eagle import Eagle2Decoder

    class Watching(EagleDrafter):
        def __init__(self, *a):
            super().__init__(*a)
            self.log: list[tuple[str, int]] = []

        def commit(self, st, features, next_ids):
            self.log.append(("commit", next_ids.shape[1]))
            return super().commit(st, features, next_ids)

        def propose(self, st, root_token, tree_cfg):
            self.log.append(("propose", st.length))
            return super().propose(st, root_token, tree_cfg)

    target = tiny_target("llama")
    prompt = PROMPT * 3
    cfg = DecodeConfig(80, tree=TreeConfig(8, 3, 3, 6))
    dr = Watching(tiny_head(target), target)
    history, seen, kinds = list(prompt), 0, []
    for ev in Eagle2Decoder(target, dr).generate(prompt, cfg):
        calls, seen = dr.log[seen:], len(dr.log)
        if ev.step == 0:
            assert calls == [("commit", len(prompt))]  # the prompt's pairs, read at prefill
        elif any(n.source == "head" for n in ev.tree):  # a head step: one catch-up commit, then the proposal
            assert [k for k, _ in calls] == ["commit"] * (ev.step > 1) + ["propose"], ev.step
            assert calls[-1][1] == len(history) - 1, ev.step  # every committed token read, nothing more
            kinds.append(calls[0][1] if ev.step > 1 else 1)
        else:  # a copy step: the chain alone, no head pass of any kind
            assert calls == [] and ev.draft_forwards == 0, ev.step
            kinds.append(0)
        history += ev.new_token_ids
    assert 0 in kinds  # copy steps happened ...
    assert any(n > 0 and kinds[i - 1] == 0 for i, n in enumerate(kinds) if i)  # ... and the head caught up after one
    assert history[len(prompt):] == run(BaselineDecoder(target), prompt, cfg)[0]
