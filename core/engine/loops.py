"""Does an output end in a loop? A pure check on token ids, shared by the bench, the app and the GPU check.

Small models' greedy answers often fall into a repeated phrase, and any copier (context lookup, prompt lookup)
accelerates a loop enormously: a mean speedup over prompts can rest on a few looping outputs. An output "ends in a
loop" when its last WINDOW tokens repeat one block of at most MAX_PERIOD tokens throughout: t[i] == t[i - p] for
pair of positions p apart inside the last WINDOW tokens (so the block appears at least WINDOW / p times, twice or
more). Shorter outputs are never flagged.
"""
from __future__ import annotations

from typing import Sequence

MAX_PERIOD = 64  # longest repeated block that counts as a loop (tokens)
WINDOW = 128  # how many trailing tokens must follow the block


def loop_period(tokens: Sequence[int], max_period: int = MAX_PERIOD, window: int = WINDOW) -> int | None:
    """The smallest period p <= max_period with which the last `window` tokens repeat (t[i] == t[i - p] for every
    i inside the window with i - p inside it too, so the block is seen at least window / p >= 2 times), or None: no
    loop, or fewer than `window` tokens to judge from."""
    n = len(tokens)
    if n < window:
        return None
    tail = list(tokens[n - window:])
    for p in range(1, min(max_period, window // 2) + 1):
        if all(tail[i] == tail[i - p] for i in range(p, window)):
            return p
    return None
