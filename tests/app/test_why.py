""""Why this speedup": the arithmetic on hand-made runs (app/why.py), checked against numbers worked out by hand."""
from __future__ import annotations

import math

import pytest

from app.why import WhatIf, explain, tau_at_sizes, why_html
from core.engine.autotree import interpolate
from core.engine.events import StepEvent, TreeNode, summarize
from fakes import baseline_events, eagle_events


def node(i, parent, p, accepted=False, source="head"):
    depth = 0 if parent < 0 else 1  # depth does not enter the arithmetic
    return TreeNode(i, parent, 100 + i, depth, math.log(p) if p else 0.0, accepted, source)


def step(i, probs, accepted, ms=(4.0, 8.0, 12.0), lookup=0, lookup_accepted=0):
    """A step whose head nodes have draft probabilities `probs` (all children of the root), the first `accepted`
    of them on the accepted path (a chain in the test's eyes), plus `lookup` copied nodes."""
    nodes = [TreeNode(0, -1, 1, 0, 0.0, True, "root")]
    for j, p in enumerate(probs):
        nodes.append(node(len(nodes), 0, p, j < accepted))
    for j in range(lookup):
        nodes.append(node(len(nodes), 0, 0, j < lookup_accepted, "lookup"))
    path = (0,) + tuple(range(1, accepted + 1)) + tuple(range(len(probs) + 1, len(probs) + 1 + lookup_accepted))
    draft, verify, total = ms
    return StepEvent(i, "eagle2", tuple(range(accepted + lookup_accepted + 1)), tuple(nodes), path,
                     draft_ms=draft, verify_ms=verify, step_ms=total)


def test_predicted_speedup_is_tau_times_plain_step_over_drafting_step():
    base = summarize(baseline_events("Hello, world! " * 3, ms=10.0))
    events = eagle_events("Hello, world! " * 3, [2, 1, 3], ms=12.0)  # draft 4 ms, verify 8 ms per step
    st = summarize(events)
    w = explain("EAGLE-2", base, st, events)
    assert w.plain_ms == pytest.approx(10.0)
    assert (w.draft_ms, w.verify_ms, w.other_ms) == pytest.approx((4.0, 8.0, 0.0))
    decode = [e for e in events if e.step > 0]  # tau over the decode steps, the steps the costs are timed on
    tau = sum(len(e.new_token_ids) for e in decode) / len(decode)
    assert w.tau == pytest.approx(tau) and w.tau > st.tau  # the prefill's single token is left out
    assert w.predicted == pytest.approx(tau * 10.0 / 12.0)
    assert w.break_even_tau == pytest.approx(1.2)
    assert w.in_plain_steps(w.verify_ms) == pytest.approx(0.8)
    # measured is the tokens/s ratio of the whole run (prefill included), which the prediction does not model
    assert w.measured == pytest.approx(st.tokens_per_s / base.tokens_per_s)
    assert w.what_if == ()  # no verify profile: no what-if


def test_no_decode_steps_no_explanation():
    base = summarize(baseline_events("a", ms=10.0))  # a prefill only
    st = summarize(eagle_events("ab", [1]))
    assert explain("EAGLE-2", base, st, []) is None


def test_tau_at_sizes_is_calibrated_to_the_run_and_ranks_by_draft_probability():
    # two steps of 3 head nodes each; probability mass 1.0 + 0.6 = 1.6 per step on average, 1.0 drafts accepted
    steps = [step(1, [0.6, 0.3, 0.1], 1), step(2, [0.4, 0.1, 0.1], 1)]
    taus = tau_at_sizes(steps, (1, 2, 3, 4, 5))
    c = 1.0 / ((1.0 + 0.6) / 2)
    assert taus[4] == pytest.approx(2.0)  # the run's own size gives the run's own tau
    assert taus[1] == pytest.approx(1.0)  # the root alone: plain decoding
    assert taus[2] == pytest.approx(1.0 + c * (0.6 + 0.4) / 2)
    assert taus[3] == pytest.approx(1.0 + c * (0.9 + 0.5) / 2)
    assert 5 not in taus  # bigger than any tree the run drafted: not estimated
    # a step that drafted fewer head nodes keeps all of its own at bigger sizes
    uneven = tau_at_sizes([step(1, [0.5], 1), step(2, [0.5, 0.5, 0.5], 1)], (2, 4))
    c = 1.0 / ((0.5 + 1.5) / 2)
    assert uneven[2] == pytest.approx(1.0 + c * 0.5) and uneven[4] == pytest.approx(2.0)


def test_lookup_tokens_are_kept_and_widen_every_verify():
    steps = [step(1, [0.5, 0.5], 1, lookup=2, lookup_accepted=1)] * 2
    taus = tau_at_sizes(steps, (1, 3))
    assert taus[1] == pytest.approx(2.0)  # lookup's accepted token stays when the head drafts nothing
    assert taus[3] == pytest.approx(3.0)


def test_what_if_prices_verify_from_the_profile_scaled_to_the_run():
    base = summarize(baseline_events("x" * 6, ms=10.0))
    steps = [StepEvent(0, "eagle2", (1,), verify_ms=10, step_ms=10)] + [
        step(i, [0.6, 0.3, 0.1], 1, ms=(5.0, 20.0, 27.0)) for i in (1, 2)]
    st = summarize(steps)
    profile = {1: 10.0, 2: 11.0, 4: 16.0, 8: 30.0}  # the run verified 4 tokens: 20 ms here against 16 measured
    w = explain("EAGLE-2", base, st, steps, profile)
    plain = explain("EAGLE-2", base, st, steps)
    assert (w.tau, w.predicted) == (plain.tau, plain.predicted)  # the what-if never changes the run's own numbers
    rows = {r.size: r for r in w.what_if}
    assert set(rows) == {1, 2, 4}
    assert rows[4].run and not rows[2].run and w.what_if[-1] is rows[4]  # the run as measured comes last
    assert rows[4].verify_ms == pytest.approx(20.0) and rows[4].step_ms == pytest.approx(27.0)
    assert rows[4].speedup == pytest.approx(w.predicted)  # the run's own row reproduces the prediction
    assert rows[2].verify_ms == pytest.approx(20.0 * 11.0 / 16.0)
    assert rows[1].step_ms == pytest.approx(20.0 * 10.0 / 16.0 + 2.0)  # no draft pass for the root alone
    assert rows[1].tau == pytest.approx(1.0)
    assert isinstance(rows[2], WhatIf) and rows[2].speedup == pytest.approx(rows[2].tau * 10.0 / rows[2].step_ms)


def test_interpolate_between_and_outside_measured_sizes():
    prof = {1: 10.0, 4: 16.0, 8: 30.0}
    assert interpolate(prof, 2) == pytest.approx(12.0)
    assert interpolate(prof, 8) == pytest.approx(30.0)
    assert interpolate(prof, 100) == pytest.approx(30.0) and interpolate(prof, 0) == pytest.approx(10.0)


def test_panel_shows_the_numbers_and_the_verdict():
    base = summarize(baseline_events("x" * 6, ms=10.0))
    steps = [step(i, [0.6, 0.3, 0.1], 1, ms=(5.0, 20.0, 27.0)) for i in (1, 2)]
    w = explain("EAGLE-2", base, summarize(steps), steps, {1: 10.0, 4: 16.0})
    page = why_html([w])
    assert f"{w.predicted:.2f}×" in page and "2.70" in page  # a 27 ms step is 2.70 plain steps
    assert "slower than plain decoding" in page and "breaks even at τ = 2.70" in page
    assert "this run" in page
    assert "arithmetic appears here" in why_html([])
