"""core/engine/loops.py: an output ends in a loop when its last 128 tokens repeat a block of at most 64 tokens."""
from __future__ import annotations

from core.engine.loops import MAX_PERIOD, WINDOW, loop_period


def test_periodic_tail_is_flagged_with_its_smallest_period():
    assert loop_period([1, 2, 3] * 50) == 3
    assert loop_period([9] * WINDOW) == 1
    assert loop_period(list(range(500)) + [4, 5] * 64) == 2  # fresh text first, then the loop fills the window
    assert loop_period(list(range(MAX_PERIOD)) * 2) == MAX_PERIOD  # a 64-token block seen twice


def test_no_loop_short_output_or_too_long_a_period():
    assert loop_period(list(range(300))) is None
    assert loop_period([1] * (WINDOW - 1)) is None  # too short to judge
    assert loop_period(list(range(MAX_PERIOD + 1)) * 3) is None  # period 65 is not a loop here
    tail_broken = [1, 2] * 64
    tail_broken[-1] = 7
    assert loop_period(tail_broken) is None  # one token off at the end: not a loop through the last 128
