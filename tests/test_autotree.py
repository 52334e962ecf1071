"""core/autotree.py: the `auto` tree calibrates acceptance at the run's own sampling settings."""
from __future__ import annotations

from conftest import PROMPT, OracleDrafter, run, tiny_head, tiny_target
from core.autotree import choose_tree
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
