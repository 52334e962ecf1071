"""summarize() arithmetic on hand-made events (docs/ARCHITECTURE.md §6.6), and the draft-forward accounting of a real run."""
from __future__ import annotations

import dataclasses

import pytest

from conftest import PROMPT, run, tiny_head, tiny_target
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder
from core.engine.events import RunStats, StepEvent, TreeNode, summarize


def nodes(parents: list[int], accepted: tuple[int, ...]) -> tuple[TreeNode, ...]:
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    return tuple(TreeNode(i, p, 100 + i, depth[i], -0.1 * i, i in accepted) for i, p in enumerate(parents))


def eagle_events() -> list[StepEvent]:
    e0 = StepEvent(0, "eagle2", (7,), draft_ms=2.0, verify_ms=8.0, step_ms=10.0, draft_forwards=1)
    e1 = StepEvent(1, "eagle2", (101, 103, 5), nodes([-1, 0, 0, 1, 2], (0, 1, 3)), (0, 1, 3),
                   draft_ms=3.0, verify_ms=2.0, step_ms=5.0, draft_forwards=3)
    e2 = StepEvent(2, "eagle2", (9,), nodes([-1, 0, 1, 1], (0,)), (0,), draft_ms=1.0, verify_ms=3.0, step_ms=4.0,
                   draft_forwards=3)
    e3 = StepEvent(3, "eagle2", (102, 6), nodes([-1, 0, 0, 0, 1, 2], (0, 2)), (0, 2), draft_ms=0.5, verify_ms=0.5,
                   step_ms=1.0, draft_forwards=3, finished=True)
    return [e0, e1, e2, e3]


def test_summarize_eagle_arithmetic():
    s = summarize(eagle_events())
    assert s.method == "eagle2"
    assert s.new_tokens == 1 + 3 + 1 + 2
    assert s.seconds == pytest.approx(0.020)
    assert s.tokens_per_s == pytest.approx(7 / 0.020)
    assert s.ttft_s == pytest.approx(0.010)
    assert s.target_forwards == 4
    assert s.tau == pytest.approx(7 / 4)  # bonus tokens included; prefill counts as a forward
    assert s.draft_forwards == 10
    assert s.draft_s == pytest.approx(0.0065) and s.verify_s == pytest.approx(0.0135)
    assert s.steps == 3  # verify steps, prefill excluded
    assert s.drafted_tokens == 4 + 3 + 5  # non-root tree nodes
    assert s.accepted_drafts == 2 + 0 + 1
    assert s.accept_rate == pytest.approx(3 / 12)
    assert s.accept_hist == (1, 1, 1)  # one step each with 0, 1, 2 accepted drafts
    assert s.depth_accept == pytest.approx((2 / 3, 1 / 3))  # unconditional: P(path reaches depth d)


def test_summarize_baseline_and_empty():
    events = [StepEvent(i, "baseline", (i,), verify_ms=2.0, step_ms=2.0) for i in range(5)]
    s = summarize(events)
    assert (s.method, s.new_tokens, s.target_forwards, s.tau, s.steps) == ("baseline", 5, 5, 1.0, 0)
    assert s.tokens_per_s == pytest.approx(500.0)
    assert s.accept_hist == () and s.depth_accept == () and s.accept_rate == 0.0
    empty = summarize([])
    assert (empty.new_tokens, empty.seconds, empty.tokens_per_s, empty.tau) == (0, 0.0, 0.0, 0.0)


def test_as_dict_is_plain_data():
    d = summarize(eagle_events()).as_dict()
    assert d["accept_hist"] == [1, 1, 1] and isinstance(d["depth_accept"], list)
    assert set(d) == {f.name for f in dataclasses.fields(RunStats)} | {"other_s", "accepted_head", "lookup_share"}
    assert d["step_split_ms"] == pytest.approx([5.5 / 3, 4.5 / 3, 0.0])


def test_step_split_is_target_draft_and_the_rest_after_prefill():
    """Mean ms per decode step (prefill excluded): target forward, draft head, and what neither explains."""
    ev = [StepEvent(0, "eagle2", (1,), draft_ms=50.0, verify_ms=50.0, step_ms=100.0),
          StepEvent(1, "eagle2", (2, 3), nodes([-1, 0], (0, 1)), (0, 1), draft_ms=4.0, verify_ms=10.0, step_ms=16.0),
          StepEvent(2, "eagle2", (4,), nodes([-1, 0], (0,)), (0,), draft_ms=2.0, verify_ms=12.0, step_ms=18.0)]
    s = summarize(ev)
    assert s.step_split_ms == pytest.approx((11.0, 3.0, 3.0))
    assert s.other_s == pytest.approx(0.134 - 0.056 - 0.072)  # over the whole run, prefill included


def test_events_are_frozen():
    e = eagle_events()[1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.step = 3
    assert e.accepted_drafts == 2 and StepEvent(0, "eagle2", (1,)).accepted_drafts == 0


@pytest.mark.parametrize("tree", [TreeConfig(10, 3, 2), TreeConfig(2, 1, 1), TreeConfig(1, 1, 1)],
                         ids=lambda t: f"T{t.total_tokens}-D{t.depth}-K{t.top_k}")
def test_draft_forwards_count_real_head_calls(tree):
    """RunStats.draft_forwards equals the number of draft-head passes actually run (each counted once)."""
    tgt = tiny_target("llama")
    head = tiny_head(tgt)
    calls = []
    forward = head.forward
    head.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
    drafter = EagleDrafter(head, tgt)
    calls.clear()  # the drafter times its layers when it is built; those passes draft nothing
    _, events = run(Eagle2Decoder(tgt, drafter), PROMPT, DecodeConfig(max_new_tokens=20, tree=tree))
    assert summarize(events).draft_forwards == len(calls)
    assert summarize(events).target_forwards == len(events)
    assert all(e.step_ms >= e.verify_ms + e.draft_ms for e in events)  # the split's parts lie inside the step


def test_accepted_drafts_split_into_lookup_and_head():
    """A step whose accepted path runs through a head node then a grafted lookup node counts one of each; the run's
    statistics pool them and give the copied share."""
    tree = (TreeNode(0, -1, 7, 0, 0.0, True, "root"), TreeNode(1, 0, 8, 1, -0.1, True, "head"),
            TreeNode(2, 0, 9, 1, -0.5, False, "head"), TreeNode(3, 1, 10, 2, 0.0, True, "lookup"),
            TreeNode(4, 3, 11, 3, 0.0, True, "lookup"))
    e1 = StepEvent(1, "eagle2", (8, 10, 11, 12), tree, (0, 1, 3, 4), step_ms=1.0)
    e2 = StepEvent(2, "eagle2", (13,), tree[:3], (0,), step_ms=1.0)
    assert (e1.accepted_drafts, e1.accepted_lookup) == (3, 2) and e2.accepted_lookup == 0
    s = summarize([StepEvent(0, "eagle2", (7,), step_ms=1.0), e1, e2])
    assert (s.accepted_drafts, s.accepted_lookup, s.accepted_head) == (3, 2, 1)
    assert s.lookup_share == pytest.approx(2 / 3)
    assert s.as_dict()["lookup_share"] == pytest.approx(2 / 3) and s.as_dict()["accepted_head"] == 1
    assert summarize([StepEvent(0, "baseline", (1,), step_ms=1.0)]).lookup_share is None


def test_run_stats_flag_an_output_that_ends_in_a_loop():
    looping = [StepEvent(i, "baseline", (i % 5,), step_ms=1.0) for i in range(130)]
    fresh = [StepEvent(i, "baseline", (i,), step_ms=1.0) for i in range(130)]
    assert summarize(looping).loop_period == 5 and summarize(fresh).loop_period is None


def test_a_real_run_counts_lookup_tokens_as_the_ui_colours_them():
    """On a tiny target with a prompt that repeats, the copied tokens counted per step equal the tokens the UI marks
    as copied (app/render.py token_lookup), and the head's share is the rest."""
    from app.render import token_lookup

    tgt = tiny_target("llama")
    cfg = DecodeConfig(max_new_tokens=60, tree=TreeConfig(8, 3, 2, lookup=8))
    _, events = run(Eagle2Decoder(tgt, EagleDrafter(tiny_head(tgt), tgt)), PROMPT * 3, cfg)
    s = summarize(events)
    flags = token_lookup(events)
    assert s.accepted_lookup > 0 and s.accepted_head > 0  # both kinds were accepted in this run
    assert s.accepted_lookup == sum(flags) and s.accepted_head == s.accepted_drafts - sum(flags)
