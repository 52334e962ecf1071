"""core/engine/autotree.py: the `auto` tree calibrates acceptance at the run's own sampling settings, plans size, depth and
context lookup from what it saw (pure), and its verify-cost profile is not thrown off by other work on the machine."""
from __future__ import annotations

import pytest

from conftest import PROMPT, OracleDrafter, run, tiny_head, tiny_target
from core.engine.autotree import (Calibration, _draft_cost, calibrate, choose_tree, describe, interpolate, plan_tree,
                           verify_profile)
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
from core.engine.eagle import Eagle2Decoder
from core.engine.events import StepEvent

PROFILE = {2: 70.0, 4: 71.0, 8: 72.0, 16: 75.0, 32: 90.0, 64: 130.0}  # ms per verify, the shape of a 2-core CPU


def cal(per_depth: list[float], head_accepted: float, draft_ms: float = 30.0, lookup_accepted: float = 0.0,
        lookup_nodes: int = 0, steps: int = 4) -> Calibration:
    """Every step: one node per depth with exp(score) per_depth[d-1], plus 7 siblings per depth at 1 % each."""
    nodes = tuple((v, d + 1) for d, v in enumerate(per_depth)) + tuple((0.01, d + 1) for d in range(len(per_depth))
                                                                         for _ in range(7))
    return Calibration((nodes,) * steps, head_accepted, lookup_accepted, (lookup_nodes,) * steps, draft_ms,
                       len(per_depth))


def test_sampled_calibration_sees_lower_acceptance_than_greedy():
    """Drafts planted from the greedy continuation: accepted at T=0, mostly rejected once the target samples."""
    tgt = tiny_target("llama")
    ref, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=80))
    dec = Eagle2Decoder(tgt, OracleDrafter(tiny_head(tgt), tgt, PROMPT + ref, seed=1))
    big = TreeConfig(total_tokens=16, depth=4, top_k=3, lookup=0)
    greedy = calibrate(dec, PROMPT, big, 40, SamplingConfig())
    sampled = calibrate(dec, PROMPT, big, 40, SamplingConfig(temperature=1.0, seed=3))
    assert sampled.head_accepted < greedy.head_accepted
    assert all(1 <= d <= 4 for step in greedy.nodes for _, d in step) and greedy.depth == 4
    assert greedy.lookup_widths == (0,) * len(greedy.nodes)  # lookup off: no copied nodes in any step
    copying = calibrate(dec, PROMPT, TreeConfig(total_tokens=16, depth=4, top_k=3, lookup=6), 40, SamplingConfig())
    assert len(copying.lookup_widths) == len(copying.nodes) and max(copying.lookup_widths) <= 6
    assert sum(copying.lookup_widths) / len(copying.nodes) == pytest.approx(copying.lookup_nodes)
    sizes = (2, 8, 16)
    report = choose_tree(dec, PROMPT, depth=4, top_k=3, max_new_tokens=40, sizes=sizes)
    assert set(report.verify_ms) == set(sizes) and report.chosen.total_tokens in sizes
    assert 1 <= report.chosen.depth <= 4 and report.chosen.top_k == 3
    assert report.chosen.lookup == 10  # greedy keeps the configured lookup


def test_plan_goes_shallow_when_deep_drafts_are_never_accepted():
    """T=1-like: the first level is accepted 40 % of the time, deeper levels almost never; six draft levels cost
    30 ms. Planning keeps depth 1: the five extra passes would cost 25 ms for ~0.02 tokens."""
    r = plan_tree(cal([0.45, 0.02, 0.005, 0.001, 0.001, 0.001], head_accepted=0.4), PROFILE, top_k=8, lookup=0)
    assert r.chosen.depth == 1 and r.chosen.lookup == 0
    assert r.draft_ms == pytest.approx(5.0)


def test_plan_goes_deep_when_the_chain_is_confident():
    scores = [0.9 ** d for d in range(1, 7)]
    r = plan_tree(cal(scores, head_accepted=sum(scores), draft_ms=12.0), PROFILE, top_k=8, lookup=0)
    assert r.chosen.depth == 6 and r.chosen.total_tokens >= 8
    assert r.expected_tokens[r.chosen.total_tokens] > 4.0


def test_lookup_width_is_priced_per_step_where_the_verify_cost_jumps():
    """A chain of 10 copied tokens in half the steps is not 5 tokens in every step: past a kernel's jump in the
    verify profile (16 -> 24 tokens here), the per-step widths make a wide head tree too dear, the mean does not."""
    from dataclasses import replace

    jump = {2: 50.0, 4: 50.0, 8: 50.0, 12: 50.0, 16: 52.0, 24: 100.0, 32: 110.0, 48: 130.0, 64: 150.0}
    nodes = tuple((v, 1) for v in [0.4, 0.15, 0.12, 0.1, 0.08, 0.06, 0.05, 0.04])
    c = Calibration((nodes,) * 4, head_accepted=1.0, lookup_accepted=2.0, lookup_widths=(5, 5, 5, 5), draft_ms=6.0,
                    depth=1)  # 5 copied nodes in every step: the same mean width as below
    at_mean = plan_tree(c, jump, top_k=8, lookup=10, plan_lookup=False).chosen
    per_step = plan_tree(replace(c, lookup_widths=(10, 0, 10, 0)), jump, top_k=8, lookup=10, plan_lookup=False).chosen
    assert at_mean.total_tokens + 10 > 16 and per_step.total_tokens + 10 <= 16  # stays below the jump
    assert per_step.lookup == at_mean.lookup == 10


@pytest.mark.parametrize("lookup_accepted, kept", [(3.0, True), (0.0, False)])
def test_plan_keeps_lookup_only_when_it_pays(lookup_accepted, kept):
    """Ten grafted lookup nodes widen the verify; they stay only if they were seen to add tokens."""
    c = cal([0.6, 0.3, 0.1, 0.05, 0.02, 0.01], head_accepted=0.9, lookup_accepted=lookup_accepted, lookup_nodes=10)
    r = plan_tree(c, PROFILE, top_k=8, lookup=10)
    assert (r.chosen.lookup == 10) is kept


def test_greedy_plan_keeps_the_configured_lookup():
    """A greedy run keeps lookup even when the short calibration saw it add nothing (copying comes later)."""
    c = cal([0.6, 0.3, 0.1, 0.05, 0.02, 0.01], head_accepted=0.9, lookup_accepted=0.0, lookup_nodes=10)
    assert plan_tree(c, PROFILE, top_k=8, lookup=10, plan_lookup=False).chosen.lookup == 10
    assert plan_tree(c, PROFILE, top_k=8, lookup=0, plan_lookup=False).chosen.lookup == 0


def test_untrained_head_verifies_the_least_despite_timing_noise():
    """Nothing accepted: the smallest tree wins, even when a larger size happened to time faster."""
    noisy = {**PROFILE, 8: 65.0}
    r = plan_tree(cal([0.3] * 6, head_accepted=0.0), noisy, top_k=8, lookup=0)
    assert (r.chosen.total_tokens, r.chosen.depth) == (2, 1) and r.calibration == 0.0


def test_interpolate_between_measured_sizes():
    assert interpolate(PROFILE, 12) == pytest.approx(73.5)
    assert interpolate(PROFILE, 1) == 70.0 and interpolate(PROFILE, 100) == 130.0


def test_verify_profile_survives_a_burst_of_load():
    """A virtual clock in which the first three timed verifies are slowed by 500 ms (another process running):
    every size still reads its unloaded cost, because sizes are timed round-robin and the fastest reading is kept.
    Timed back to back, the first size would have read 500 ms on every repeat."""
    readings = 0
    t = 0.0

    def clock(device):
        nonlocal readings, t
        readings += 1
        if readings % 2 == 0:  # the end of a timed verify: 2 ms unloaded, 502 ms during the burst
            t += 0.002 + (0.5 if readings <= 6 else 0.0)
        return t

    sizes = (2, 4, 8, 16)
    prof = verify_profile(tiny_target("llama"), sizes, prefix=32, rounds=3, clock=clock)
    assert readings == 2 * 3 * len(sizes)
    assert prof == {n: pytest.approx(2.0) for n in sizes}


def test_draft_cost_is_not_zeroed_by_copy_steps():
    """Three copy steps (the lookup chain alone, no head pass) and two head steps: the cost is the head steps' median
    times their share, not the all-step median (0 ms, which would price every tree's drafting as free)."""
    ev = [StepEvent(i, "eagle2", (1,), draft_ms=ms, draft_forwards=f)
          for i, (ms, f) in enumerate([(0.1, 0), (40.0, 3), (0.2, 0), (60.0, 3), (0.1, 0)])]
    assert _draft_cost(ev) == pytest.approx(50.0 * 2 / 5)
    assert _draft_cost(ev[::2]) == 0.0  # nothing drafted: nothing to pay


def test_verify_profile_times_sizes_beyond_the_prefix():
    """Tree sizes larger than the timing prefix get tokens of their own (they used to be cut to the prefix)."""
    prof = verify_profile(tiny_target("llama"), (2, 48), prefix=16, rounds=1)
    assert set(prof) == {2, 48} and all(v > 0 for v in prof.values())


SLOW_FEW_ROWS = {1: 184.0, 2: 313.0, 4: 330.0, 8: 420.0, 16: 779.0, 32: 1300.0, 64: 2400.0}  # a 0.5B target, AVX2


def test_plan_falls_back_to_the_root_alone_when_no_tree_pays():
    """A 2-token verify costs 1.7x the one-token step (few-row products on one CPU): a head accepting 0.5 tokens a
    step cannot pay for any width, so the plan is the root alone with no draft pass. A sampled run (lookup planned,
    seen to add 0.3 tokens for 10 nodes) decodes plainly; a greedy run keeps the configured lookup (copying comes
    later than a calibration sees), so where its calibration copied nothing it gets the chain alone, which costs a
    plain step wherever nothing matches; with lookup off, greedy decodes plainly too."""
    scores = [0.5, 0.2, 0.1, 0.05, 0.02, 0.01]
    sampled = plan_tree(cal(scores, head_accepted=0.5, lookup_accepted=0.3, lookup_nodes=10), SLOW_FEW_ROWS, top_k=8,
                        lookup=10)
    assert (sampled.chosen.total_tokens, sampled.chosen.lookup) == (1, 0) and sampled.draft_ms == 0.0
    assert describe(sampled.chosen) == "plain decoding (no tree pays here)"
    c = cal(scores, head_accepted=0.5)
    greedy = plan_tree(c, SLOW_FEW_ROWS, top_k=8, lookup=10, plan_lookup=False)
    assert (greedy.chosen.total_tokens, greedy.chosen.lookup) == (1, 10) and greedy.draft_ms == 0.0
    assert describe(greedy.chosen) == "context lookup alone (chain 10, no head)"
    plain = plan_tree(c, SLOW_FEW_ROWS, top_k=8, lookup=0, plan_lookup=False).chosen
    assert (plain.total_tokens, plain.lookup) == (1, 0)


def test_plan_keeps_a_tree_where_the_verify_is_nearly_flat():
    """The same head where a 16-token verify costs 7 % more than one token: a tree pays, plain decoding loses."""
    scores = [0.8 ** d for d in range(1, 7)]
    r = plan_tree(cal(scores, head_accepted=sum(scores) * 0.8, draft_ms=12.0), {1: 68.0, **PROFILE}, top_k=8,
                  lookup=0)
    assert r.chosen.total_tokens > 1 and r.draft_ms > 0


def test_plan_can_choose_context_lookup_alone():
    """Nothing accepted from the head, but copied chains add 3 tokens a step: the root plus the lookup chain, with no
    head pass (a sampled run plans lookup; its draft cost is zero)."""
    c = cal([0.3] * 6, head_accepted=0.0, lookup_accepted=3.0, lookup_nodes=10)
    r = plan_tree(c, {1: 68.0, **PROFILE}, top_k=8, lookup=10)
    assert (r.chosen.total_tokens, r.chosen.lookup) == (1, 10) and r.draft_ms == 0.0
    assert r.expected_tokens[1] == pytest.approx(4.0)
    assert describe(r.chosen) == "context lookup alone (chain 10, no head)"


def test_a_planned_root_alone_decodes_like_the_baseline():
    """What the plan hands the engine when it picks plain decoding (one node, lookup off): the same tokens as the
    baseline, one token per target forward, and no draft pass."""
    tgt = tiny_target("llama")
    ref, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=24))
    plain = TreeConfig(total_tokens=1, depth=1, top_k=8, lookup=0)
    out, events = run(Eagle2Decoder(tgt, OracleDrafter(tiny_head(tgt), tgt, PROMPT + ref, seed=1)), PROMPT,
                      DecodeConfig(max_new_tokens=24, tree=plain))
    assert out == ref
    assert all(len(e.new_token_ids) == 1 and e.draft_forwards == 0 for e in events)
