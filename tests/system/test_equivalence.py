"""Greedy EAGLE-2 == greedy baseline, token for token (docs/ARCHITECTURE.md §6.1), on tiny random targets of five families.

Losslessness does not depend on draft quality, so an untrained head must reproduce the baseline exactly; the
`OracleDrafter` plants the right answer along random paths so that long accepted chunks, non-contiguous cache
compaction and EOS / max-token clipping inside a chunk are exercised too. The baseline itself is checked against
the stock HF forward (no cache, HF's own causal and sliding-window masks), so "equal to the baseline" means "equal
to the model".
"""
from __future__ import annotations

import functools

import pytest
import torch

from conftest import KINDS, PROMPT, OracleDrafter, assert_varied, run, tiny_head, tiny_model, tiny_target
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder
from core.engine.events import summarize

N_NEW = 210


@functools.lru_cache(maxsize=None)
def reference(kind: str, n: int = N_NEW) -> tuple[int, ...]:
    """Greedy baseline output for PROMPT (no EOS)."""
    tokens, events = run(BaselineDecoder(tiny_target(kind)), PROMPT, DecodeConfig(max_new_tokens=n))
    assert len(events) == n and events[-1].finished and not any(e.finished for e in events[:-1])
    return tuple(tokens)


def eagle(kind: str, tree: TreeConfig, vocab_ids: torch.Tensor | None = None, n: int = N_NEW, eos=()):
    tgt = tiny_target(kind, eos=eos)
    dec = Eagle2Decoder(tgt, EagleDrafter(tiny_head(tgt, vocab_ids), tgt))
    return run(dec, PROMPT, DecodeConfig(max_new_tokens=n, tree=tree))


@pytest.mark.parametrize("kind", KINDS)
def test_baseline_matches_stock_hf_forward(kind):
    """The adapter's masks (incl. sliding windows shorter than the prompt) agree with HF's own, and the output is
    not a short loop, so the equivalence tests below are meaningful."""
    out = list(reference(kind))
    assert_varied(out)
    model = tiny_model(kind)
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT + out])).logits[0]  # (P + N, V), fresh forward, HF masks
    assert logits[len(PROMPT) - 1 : -1].argmax(-1).tolist() == out


TREES = [
    TreeConfig(1, 1, 1, lookup=0),  # no drafting: every step verifies the root alone
    TreeConfig(1, 1, 1, lookup=10),  # context lookup alone, no head
    TreeConfig(2, 1, 1, lookup=0),  # one draft token per step
    TreeConfig(12, 10, 1, lookup=10),  # deep and narrow: a chain of 11, plus lookup
    TreeConfig(24, 5, 4, lookup=0),
    TreeConfig(60, 5, 10, lookup=10),  # wide
    TreeConfig(24, 5, 4, lookup=10, stop_below=0.05),  # dynamic depth: each step drafts as deep as it is sure
]


def tree_id(t: TreeConfig) -> str:
    return f"T{t.total_tokens}-D{t.depth}-K{t.top_k}-L{t.lookup}" + (f"-S{t.stop_below:g}" if t.stop_below else "")


@pytest.mark.parametrize("tree", TREES, ids=tree_id)
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_eagle_equals_baseline(kind, tree):
    """Regression guard for masks, positions, cache compaction and acceptance with an untrained head."""
    tokens, events = eagle(kind, tree)
    assert tokens == list(reference(kind))
    stats = summarize(events)
    assert stats.new_tokens == N_NEW
    assert stats.target_forwards == len(events)  # one target forward per step
    assert all(sum(n.source != "lookup" for n in e.tree) <= tree.total_tokens for e in events)
    assert all(sum(n.source == "lookup" for n in e.tree) <= tree.lookup for e in events)
    assert events[-1].finished and not any(e.finished for e in events[:-1])


def test_lookup_nodes_are_verified_and_accepted():
    """Gemma 3's tiny model repeats short n-grams: lookup proposals get accepted and the output stays the same."""
    tokens, events = eagle("gemma3", TreeConfig(1, 1, 1, lookup=10))
    assert tokens == list(reference("gemma3"))
    accepted = [n for e in events for n in e.tree if n.accepted and n.source == "lookup"]
    assert accepted and all(n.depth >= 1 for n in accepted)
    assert summarize(events).tau > 1.0


@pytest.mark.parametrize("loop", [[7] * 12, [7, 8, 9] * 6], ids=["period1", "period3"])
@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_greedy_eagle_with_overlapping_lookup_copies(kind, loop):
    """A prompt that ends in a loop makes lookup copy with overlap (chains of the full `lookup` length that run past
    the history); whatever the target does next, the output is the baseline's."""
    prompt, tree, n = PROMPT + loop, TreeConfig(1, 1, 1, lookup=10), 60
    expected, _ = run(BaselineDecoder(tiny_target(kind)), prompt, DecodeConfig(max_new_tokens=n))
    tgt = tiny_target(kind)
    tokens, events = run(Eagle2Decoder(tgt, EagleDrafter(tiny_head(tgt), tgt)), prompt,
                         DecodeConfig(max_new_tokens=n, tree=tree))
    assert tokens == expected
    chains = [sum(node.source == "lookup" for node in e.tree) for e in events[1:]]
    assert chains.count(tree.lookup) >= 10  # full-length copies were grafted (and verified) on many steps


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_greedy_eagle_reduced_draft_vocab(kind):
    """A reduced draft vocabulary (vocab_ids subset, d2t) changes proposals, never the output."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randperm(128, generator=g)[:40]
    ids = torch.unique(torch.cat([ids, torch.tensor(reference(kind)[:20])]))  # some proposals can be right
    tokens, events = eagle(kind, TreeConfig(16, 4, 4), vocab_ids=ids)
    assert tokens == list(reference(kind))
    drafted = {n.token_id for e in events for n in e.tree if n.source == "head"}
    assert drafted and drafted <= set(ids.tolist())


def oracle_decoder(kind: str, tree: TreeConfig, seed: int, eos=()) -> Eagle2Decoder:
    tgt = tiny_target(kind, eos=eos)
    return Eagle2Decoder(tgt, OracleDrafter(tiny_head(tgt), tgt, PROMPT + list(reference(kind)), seed=seed))


@pytest.mark.parametrize("tree", [TreeConfig(16, 5, 3), TreeConfig(12, 10, 1, lookup=0), TreeConfig(40, 6, 8)],
                         ids=tree_id)
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_eagle_with_accepted_chunks(kind, tree):
    """Long accepted paths (anywhere in the tree) still give the baseline's tokens; tau > 1 shows they happened."""
    tokens, events = run(oracle_decoder(kind, tree, seed=3), PROMPT, DecodeConfig(max_new_tokens=N_NEW, tree=tree))
    assert tokens == list(reference(kind))
    stats = summarize(events)
    assert stats.tau > 1.5
    assert max(e.accepted_drafts for e in events) == min(tree.depth, tree.total_tokens - 1)  # a full-depth hit
    if tree.top_k > 1:  # some accepted paths are not the first nodes after the prefix: keep() had to gather
        assert any(e.accepted_path != tuple(range(len(e.accepted_path))) for e in events[1:])
    for e in events[1:]:  # the path is a chain of parent links that starts at the root
        parents = {n.node_id: n.parent for n in e.tree}
        assert e.accepted_path[0] == 0
        assert all(parents[b] == a for a, b in zip(e.accepted_path, e.accepted_path[1:]))
        assert [n.node_id for n in e.tree if n.accepted] == sorted(e.accepted_path)


@pytest.mark.parametrize("n", [1, 2, 7, 33])
def test_max_new_tokens_is_exact_inside_accepted_chunks(n):
    tree = TreeConfig(16, 6, 2)
    tokens, events = run(oracle_decoder("llama", tree, seed=n), PROMPT, DecodeConfig(max_new_tokens=n, tree=tree))
    assert tokens == list(reference("llama")[:n])
    assert events[-1].finished and sum(e.finished for e in events) == 1


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_eos_stops_both_decoders_and_nothing_follows(kind):
    """Pick a token the model emits mid-run as EOS: both decoders stop right after its first occurrence."""
    ref = list(reference(kind))
    eos = next(t for t in ref[25:] if t not in ref[:25])  # first occurrence well inside the run
    cut = ref.index(eos) + 1
    base, bev = run(BaselineDecoder(tiny_target(kind, eos=(eos,))), PROMPT, DecodeConfig(max_new_tokens=N_NEW))
    assert base == ref[:cut] and bev[-1].finished
    tree = TreeConfig(16, 6, 2)
    for seed in range(4):  # different planted depths: EOS lands at different places inside accepted chunks
        dec = oracle_decoder(kind, tree, seed=seed, eos=(eos,))
        toks, ev = run(dec, PROMPT, DecodeConfig(max_new_tokens=N_NEW, tree=tree))
        assert toks == ref[:cut]
        assert ev[-1].finished and sum(e.finished for e in ev) == 1
    # stop_on_eos=False runs through it
    cfg = DecodeConfig(max_new_tokens=cut + 5, tree=tree, stop_on_eos=False)
    toks, _ = run(oracle_decoder(kind, tree, seed=0, eos=(eos,)), PROMPT, cfg)
    assert toks == ref[: cut + 5]


def test_eos_as_first_token():
    ref = list(reference("llama"))
    base, _ = run(BaselineDecoder(tiny_target("llama", eos=(ref[0],))), PROMPT, DecodeConfig(max_new_tokens=50))
    toks, ev = eagle("llama", TreeConfig(8, 3, 2), n=50, eos=(ref[0],))
    assert base == toks == ref[:1] and len(ev) == 1 and ev[0].finished
    assert ev[0].draft_forwards == 0  # finished at the prefill: the head never reads the prompt
    one, ev1 = eagle("llama", TreeConfig(8, 3, 2), n=1)
    assert one == ref[:1] and len(ev1) == 1 and ev1[0].draft_forwards == 0


def test_should_stop_ends_generation():
    tgt = tiny_target("llama")
    dec = Eagle2Decoder(tgt, EagleDrafter(tiny_head(tgt), tgt))
    calls = []
    events = list(dec.generate(PROMPT, DecodeConfig(max_new_tokens=100), should_stop=lambda: calls.append(1) or
                               len(calls) >= 3))
    assert 1 <= len(events) <= 4
    base = list(BaselineDecoder(tgt).generate(PROMPT, DecodeConfig(max_new_tokens=100), should_stop=lambda: True))
    assert len(base) == 1


def test_decoders_are_reentrant():
    """Caches are per call: two interleaved generations on one decoder do not disturb each other."""
    tgt = tiny_target("gemma3")
    dec = Eagle2Decoder(tgt, EagleDrafter(tiny_head(tgt), tgt))
    cfg = DecodeConfig(max_new_tokens=40, tree=TreeConfig(8, 3, 2))
    gens = {"a": dec.generate(PROMPT, cfg), "b": dec.generate(PROMPT[:12], cfg)}
    out: dict[str, list[int]] = {"a": [], "b": []}
    while gens:  # alternate steps until both finish
        for name in list(gens):
            event = next(gens[name], None)
            if event is None:
                del gens[name]
            else:
                out[name] += event.new_token_ids
    ta, tb = out["a"], out["b"]
    assert ta == list(reference("gemma3"))[:40]
    assert tb == run(BaselineDecoder(tgt), PROMPT[:12], DecodeConfig(max_new_tokens=40))[0]
