"""core/engine/exactness.py: the near-tie rule that explains a bf16 divergence (pure), and the margins both decoders record
(aligned with their tokens) on tiny fp32 targets."""
from __future__ import annotations

import pytest
import torch

from conftest import PROMPT, run, tiny_head, tiny_target
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder
from core.engine.exactness import NEAR_TIE_ULPS, as_dtype, classify, first_difference, is_near_tie, tolerance, top2, ulp


def test_ulp_is_the_dtype_spacing():
    assert ulp(1.0, torch.bfloat16) == 2**-7
    assert ulp(24.0, "bfloat16") == 2**-7 * 16  # [16, 32): bf16 steps of 0.125
    assert ulp(-24.0, "bf16") == 0.125
    assert ulp(24.0, torch.float32) == 2**-23 * 16
    assert ulp(0.1, torch.bfloat16) == 2**-7
    for x in (1.5, 17.0, 31.9, 100.0):  # the next representable bf16 above x (a normal number) is x + ulp(x)
        t = torch.tensor(x, dtype=torch.bfloat16)
        nxt = torch.nextafter(t, torch.tensor(float("inf"), dtype=torch.bfloat16))
        assert float(nxt - t) == ulp(float(t), torch.bfloat16)
    assert as_dtype("torch.float32") is torch.float32
    with pytest.raises(ValueError):
        as_dtype("float7")


def test_tolerance_uses_the_larger_top1_logit():
    assert tolerance([20.0, -40.0], "bfloat16") == NEAR_TIE_ULPS * 0.25  # |-40| in [32, 64): ulp 0.25
    assert tolerance([], "bfloat16") == NEAR_TIE_ULPS * 2**-7


BASE = [5, 6, 7, 8, 9]
DIVERGED = [5, 6, 7, 3, 4]


def test_planted_near_tie_is_explained():
    """At index 3 the baseline chose its token by 0.125 (one bf16 ulp at a logit of 20): a numerical near tie."""
    d = classify(BASE, DIVERGED, [4.0, 3.0, 2.0, 0.125, 1.0], [4.0, 3.0, 2.0, 0.25, 1.0], [20.0] * 5, [20.0] * 5,
                 torch.bfloat16)
    assert d is not None and d.index == 3 and d.near_tie and d.label == "numerical near tie"
    assert d.baseline_margin == 0.125 and d.method_margin == 0.25 and d.tolerance == NEAR_TIE_ULPS * 0.125
    assert d.as_dict() == {"index": 3, "baseline_margin": 0.125, "method_margin": 0.25, "near_tie": True,
                           "tolerance": 2.0, "label": "numerical near tie"}


def test_planted_real_mismatch_is_flagged():
    """Both runs chose their token by 3 logits (24 bf16 ulps at 20, tolerance 16): no rounding explains it, that is a bug."""
    d = classify(BASE, DIVERGED, [4.0, 3.0, 2.0, 3.0, 1.0], [4.0, 3.0, 2.0, 3.0, 1.0], [20.0] * 5, [20.0] * 5,
                 "bfloat16")
    assert d is not None and d.index == 3 and not d.near_tie and d.label == "mismatch"


def test_fp32_tolerance_is_tiny_so_the_same_margins_are_a_mismatch():
    d = classify(BASE, DIVERGED, [1, 1, 1, 0.125, 1], [1, 1, 1, 0.25, 1], [20.0] * 5, [20.0] * 5, torch.float32)
    assert d is not None and not d.near_tie


def test_identical_prefix_or_missing_margins():
    assert classify(BASE, BASE, [], [], [], [], "bfloat16") is None
    assert classify(BASE, BASE[:3], [], [], [], [], "bfloat16") is None  # a stopped run is not a divergence
    assert first_difference([1, 2], [1, 3]) == 1 and first_difference([], [1]) is None
    d = classify(BASE, DIVERGED, [], [], [], [], "bfloat16")  # nothing recorded: cannot be explained
    assert d is not None and d.index == 3 and not d.near_tie and d.baseline_margin is None


@pytest.mark.parametrize("small_side", ["baseline", "method"])
def test_one_small_margin_does_not_explain_a_large_one(small_side):
    """A flip needs the logit difference to move by m_baseline + m_method; one run winning by 0.1 cannot excuse the
    other winning by 9 logits (72 bf16 ulps at 20, tolerance 16 ulps): a mismatch whichever side is small."""
    small, large = [0.1], [9.0]
    mb, mm = (small, large) if small_side == "baseline" else (large, small)
    d = classify([1], [2], mb, mm, [20.0], [20.0], "bfloat16")
    assert d is not None and not d.near_tie and d.label == "mismatch"
    assert (d.baseline_margin, d.method_margin) == (mb[0], mm[0])


def test_the_sum_of_both_margins_decides_at_the_boundary():
    """Tolerance 2.0 (16 ulps of 0.125 at a top logit of 20): 1.0 + 1.0 is a near tie, 1.0 + 1.125 is not, though
    each margin alone is well inside the tolerance (the old min() rule called both near ties)."""
    assert classify([1], [2], [1.0], [1.0], [20.0], [20.0], "bfloat16").near_tie
    assert not classify([1], [2], [1.0], [1.125], [20.0], [20.0], "bfloat16").near_tie
    assert not classify([1], [2], [1.125], [1.0], [20.0], [20.0], "bfloat16").near_tie


def test_a_missing_margin_on_either_side_is_unexplained():
    """A margin of 0 on one side cannot decide alone when the other side recorded nothing."""
    assert not classify([1], [2], [0.0], [], [20.0], [20.0], "bfloat16").near_tie
    assert not classify([1], [2], [], [0.0], [20.0], [20.0], "bfloat16").near_tie
    assert not is_near_tie(None, 0.0, 2.0) and not is_near_tie(0.0, None, 2.0) and not is_near_tie(0.0, 0.0, None)
    assert is_near_tie(0.0, 0.0, 2.0)


def test_top2_margins_per_row():
    logits = torch.tensor([[1.0, 5.0, 4.5, -2.0], [3.0, 3.0, 0.0, 1.0]])  # (2, 4)
    margins, tops = top2(logits)
    assert margins == [0.5, 0.0] and tops == [5.0, 3.0]
    m16, t16 = top2(logits.bfloat16())
    assert m16 == margins and t16 == tops


def test_both_decoders_record_one_margin_per_token_at_the_same_positions():
    """fp32, greedy: EAGLE-2's margins come from the verify row that chose each token, so they equal the baseline's
    one-token margins position by position (up to fp32 rounding), and every margin is >= 0."""
    tgt = tiny_target("llama")
    cfg = DecodeConfig(max_new_tokens=40, tree=TreeConfig(12, 4, 3, lookup=10))
    base, base_events = run(BaselineDecoder(tgt), PROMPT, cfg)
    tokens, events = run(Eagle2Decoder(tgt, EagleDrafter(tiny_head(tgt), tgt)), PROMPT, cfg)
    assert tokens == base
    for evs in (base_events, events):
        assert all(len(e.margins) == len(e.top_logits) == len(e.new_token_ids) for e in evs)
    bm = [m for e in base_events for m in e.margins]
    em = [m for e in events for m in e.margins]
    assert min(bm) >= 0 and em == pytest.approx(bm, abs=1e-4)
    et = [t for e in events for t in e.top_logits]
    assert et == pytest.approx([t for e in base_events for t in e.top_logits], abs=1e-4)
    assert any(len(e.new_token_ids) > 1 for e in events)  # multi-token steps were checked too
