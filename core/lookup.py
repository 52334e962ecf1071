"""Context lookup: token guesses copied from the text itself (prompt lookup decoding, Saxena 2023), pure.

Small models repeat themselves and copy from their prompt (code edits, RAG answers, summaries, greedy loops). When
the last few tokens occurred before, the tokens that followed that occurrence are a free guess: no draft pass.
The EAGLE-2 loop grafts this chain under the root of the head's tree (core/tree.py `graft`), so one verify pass
checks both; acceptance rules are unchanged because every proposal is still a deterministic token choice.
"""
from __future__ import annotations

from typing import Sequence


def context_draft(history: Sequence[int], max_len: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Up to `max_len` tokens that followed the latest earlier occurrence of the longest matching suffix n-gram.

    history: every token so far, prompt first, ending with the root (the last committed token). Tries n-gram sizes
    max_ngram..min_ngram; the latest occurrence wins (in a loop it is the freshest copy). [] when nothing matches.
    """
    n_hist = len(history)
    if max_len <= 0 or n_hist < min_ngram + 1:
        return []
    hist = history if isinstance(history, list) else list(history)  # the decode loop passes its list: no copy
    for n in range(min(max_ngram, n_hist - 1), min_ngram - 1, -1):
        suffix = hist[n_hist - n:]
        first = suffix[0]
        # scan right to left over earlier starts; the match must end before the suffix itself starts
        for start in range(n_hist - n - 1, -1, -1):
            if hist[start] == first and hist[start:start + n] == suffix:
                follow = hist[start + n:start + n + max_len]
                if follow:
                    return follow
    return []
