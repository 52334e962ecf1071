"""core/autotree.py: the `auto` tree calibrates acceptance at the run's own sampling settings, and its verify-cost
profile is not thrown off by other work on the machine."""
from __future__ import annotations

import pytest

from conftest import PROMPT, OracleDrafter, run, tiny_head, tiny_target
from core.autotree import choose_tree, verify_profile
from core.baseline import BaselineDecoder
from core.config import DecodeConfig, SamplingConfig
from core.eagle import Eagle2Decoder


def test_sampled_calibration_sees_lower_acceptance_than_greedy():
    """Drafts planted from the greedy continuation: accepted at T=0, mostly rejected once the target samples."""
    tgt = tiny_target("llama")
    ref, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=80))
    dec = Eagle2Decoder(tgt, OracleDrafter(tiny_head(tgt), tgt, PROMPT + ref, seed=1))
    sizes = (2, 8, 16)
    greedy = choose_tree(dec, PROMPT, depth=4, top_k=3, max_new_tokens=40, sizes=sizes)
    sampled = choose_tree(dec, PROMPT, depth=4, top_k=3, max_new_tokens=40, sizes=sizes,
                          sampling=SamplingConfig(temperature=1.0, seed=3))
    assert set(greedy.verify_ms) == set(sizes) and greedy.chosen.total_tokens in sizes
    assert sampled.expected_tokens[16] < greedy.expected_tokens[16]
    assert greedy.chosen.lookup == sampled.chosen.lookup  # the engine default rides along; only the head is sized


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
