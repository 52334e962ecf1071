"""Dynamic depth (TreeConfig.stop_below): the head stops drafting below a level whose best guess is unlikely. It
must stay lossless, draft a prefix of what the fixed-depth grow drafts with fewer head passes, be planned by `auto`
only where the passes it saves pay, and round-trip through the tree spec the CLIs read."""
from __future__ import annotations

import math

import pytest

from conftest import PROMPT, run, tiny_head, tiny_target
from core.engine.autotree import STOPS, Calibration, plan_tree, stop_depth
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder

PROFILE = {1: 22.0, 2: 23.0, 4: 24.0, 8: 27.0, 16: 34.0, 32: 50.0, 64: 90.0}  # ms per verify, 2-core CPU shape


def committed_state(kind: str):
    """A drafter whose state has read the prompt, as the loop leaves it before its first proposal."""
    import torch

    tgt = tiny_target(kind)
    dr = EagleDrafter(tiny_head(tgt), tgt)
    st = dr.start()
    hidden, _ = tgt.forward(torch.tensor([PROMPT]), tgt.new_cache())
    dr.commit(st, hidden, torch.tensor([PROMPT[1:] + [7]]))
    return dr, st


def level_best(pool) -> dict[int, float]:
    from core.engine.tree import depths

    best: dict[int, float] = {}
    for n, d in enumerate(depths(pool.parents)):
        if n:
            best[d] = max(best.get(d, 0.0), math.exp(pool.scores[n]))
    return best


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_the_grow_stops_below_the_first_unlikely_level(kind):
    dr, st = committed_state(kind)
    fixed = dr.propose(st, 7, TreeConfig(24, 5, 4, lookup=0))
    best = level_best(fixed)
    assert fixed.forwards == 4 and max(best) == 5
    for level in (1, 2, 3):
        # a threshold just above this level's best node: nothing below it is drafted
        stop = min(0.999, best[level] * 1.0001)
        grown = dr.propose(st, 7, TreeConfig(24, 5, 4, lookup=0, stop_below=stop))
        if any(best[d] < stop for d in range(1, level)):
            continue  # an earlier level already falls under it (scores need not shrink level by level)
        assert max(level_best(grown)) == level and grown.forwards == level - 1
        n = len(grown.tokens)  # the same levels, the same guesses: a prefix of the fixed-depth pool
        assert grown.tokens == fixed.tokens[:n] and grown.parents == fixed.parents[:n]
        assert grown.scores == pytest.approx(fixed.scores[:n])
    assert dr.propose(st, 7, TreeConfig(24, 5, 4, lookup=0, stop_below=1e-9)).tokens == fixed.tokens


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
@pytest.mark.parametrize("stop", [0.05, 0.2])
def test_dynamic_depth_is_greedy_lossless_and_drafts_fewer_passes(kind, stop):
    """Greedy: token for token the baseline's output (a smaller tree is still a deterministic proposal, so sampled
    runs keep the target's distribution by the same acceptance rule the fixed tree uses). Steps drafted to
    different depths, each counting only the passes it ran."""
    tgt = tiny_target(kind)
    tree = TreeConfig(24, 5, 4, lookup=0, stop_below=stop)
    cfg = DecodeConfig(max_new_tokens=40, tree=tree)
    ref, _ = run(BaselineDecoder(tgt), PROMPT, cfg)
    out, events = run(Eagle2Decoder(tgt, EagleDrafter(tiny_head(tgt), tgt)), PROMPT, cfg)
    assert out == ref
    _, fixed = run(Eagle2Decoder(tgt, EagleDrafter(tiny_head(tgt), tgt)), PROMPT,
                   DecodeConfig(max_new_tokens=40, tree=TreeConfig(24, 5, 4, lookup=0)))
    per_step = lambda evs: sum(e.draft_forwards for e in evs[1:]) / len(evs[1:])  # noqa: E731
    assert per_step(events) < per_step(fixed)
    deep = [max(n.depth for n in e.tree) for e in events[1:]]
    assert 1 <= min(deep) and max(deep) <= tree.depth and len(set(deep)) > 1  # the depth moved with confidence


def test_stop_depth_follows_the_best_node_of_each_level():
    step = ((0.6, 1), (0.1, 1), (0.3, 2), (0.05, 3), (0.01, 4))
    assert stop_depth(step, 4, 0.0) == 4  # off: the fixed depth
    assert stop_depth(step, 4, 0.05) == 4
    assert stop_depth(step, 4, 0.2) == 3  # level 3's best (0.05) is under 0.2: nothing below it
    assert stop_depth(step, 4, 0.5) == 2
    assert stop_depth(step, 4, 0.7) == 1
    assert stop_depth(step, 2, 0.01) == 2  # never deeper than the plan's depth


def mixed_calibration(steps: int = 20) -> Calibration:
    """Half the steps confident all the way down (a copied phrase), half unsure from the first level."""
    sure = tuple((0.95 ** d, d) for d in range(1, 7)) + tuple((0.01, d) for d in range(1, 7) for _ in range(7))
    unsure = tuple((0.15 * 0.3 ** (d - 1), d) for d in range(1, 7)) + tuple(
        (0.01, d) for d in range(1, 7) for _ in range(7))
    nodes = (sure, unsure) * (steps // 2)
    accepted = (sum(v for v, _ in sure) + sum(v for v, _ in unsure)) / 2
    return Calibration(nodes, accepted, 0.0, (0,) * steps, 18.0, 6)


def test_plan_stops_early_where_unsure_steps_waste_deep_passes():
    """Six levels cost 18 ms. Confident steps repay them; unsure ones would waste 15 ms on levels no draft reaches.
    The planner keeps the depth and stops the unsure steps early, and expects it to be faster than either fixed
    plan."""
    c = mixed_calibration()
    r = plan_tree(c, PROFILE, top_k=8, lookup=0)
    assert r.chosen.stop_below in STOPS and r.chosen.stop_below > 0 and r.chosen.depth >= 5
    fixed = plan_tree(c, PROFILE, top_k=8, lookup=0, stops=(0.0,))
    assert fixed.chosen.stop_below == 0.0
    rate = lambda rep: rep.expected_tokens[rep.chosen.total_tokens] / (  # noqa: E731
        rep.draft_ms + PROFILE[rep.chosen.total_tokens])
    assert rate(r) > rate(fixed)
    assert r.draft_ms < 18.0 * r.chosen.depth / 6  # it charges only the levels drafted


def test_plan_keeps_the_fixed_depth_when_every_step_is_confident():
    scores = [0.9 ** d for d in range(1, 7)]
    nodes = tuple((v, d + 1) for d, v in enumerate(scores))
    c = Calibration((nodes,) * 4, sum(scores), 0.0, (0,) * 4, 12.0, 6)
    r = plan_tree(c, PROFILE, top_k=8, lookup=0)
    assert r.chosen.depth == 6
    assert stop_depth(nodes, 6, r.chosen.stop_below) == 6  # whatever it picked never cuts these steps


@pytest.mark.parametrize("spec, tree", [
    ("16,6,8,0,0.1", TreeConfig(16, 6, 8, 0, 0.1)),
    ("16,6,8,0", TreeConfig(16, 6, 8, 0)),
    ("24,6,6", TreeConfig(24, 6, 6)),
])
def test_tree_spec_round_trips(spec, tree):
    assert TreeConfig.parse(spec) == tree
    assert TreeConfig.parse(tree.spec()) == tree


@pytest.mark.parametrize("spec", ["16,6,8,0,1", "16,6,8,0,-0.1", "16,6,8,0,x", "16,6,8,0,nan", "16,6,8,0,0.1,2"])
def test_bad_stop_below_is_refused_with_a_message(spec):
    with pytest.raises(ValueError, match="stop_below|tree must be"):
        TreeConfig.parse(spec)
