"""Context lookup: token guesses copied from the text itself (prompt lookup decoding, Saxena 2023), pure.

Small models repeat themselves and copy from their prompt (code edits, RAG answers, summaries, greedy loops). When
the last few tokens occurred before, the tokens that followed that occurrence are a free guess: no draft pass.
The EAGLE-2 loop grafts this chain under the root of the head's tree (core/engine/tree.py `graft`), so one verify pass
checks both; acceptance rules are unchanged because every proposal is still a deterministic token choice.

Loops are copied whole. The copy may run into the text it is copying (copy with overlap, as LZ77 does): past the
end of the history the chain repeats its own first tokens, so a run of period p continues for the full `max_len`
tokens instead of stopping after the p tokens that separate the match from the end (inside a run of "1 1 1 1" the
latest occurrence of the suffix would leave a single token to copy). Among earlier occurrences the one
followed by the most real text wins (up to `max_len`; the latest among equals), so a copy leans on text that was
seen to continue that far and uses the overlap only when every occurrence is that close to the end.
"""
from __future__ import annotations

from typing import Sequence


def context_draft(history: Sequence[int], max_len: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Exactly `max_len` tokens copied (with overlap) after the best earlier occurrence of the longest matching suffix.

    history: every token so far, prompt first, ending with the root (the last committed token). Tries n-gram sizes
    max_ngram..min_ngram; for the first size that occurs earlier, picks the occurrence with the longest real
    continuation (capped at max_len, the latest among equals) and copies after it with overlap. [] when nothing
    matches. Cost: O(len(history)) per call (one reversed copy, C-level `list.index` scans, a slice compare per
    hit of the suffix's first token): under a millisecond on a 4,096-token history, against the tens of milliseconds
    of a target forward (docs/perf.md, "Context lookup").
    """
    n_hist = len(history)
    if max_len <= 0 or n_hist < min_ngram + 1:
        return []
    hist = history if isinstance(history, list) else list(history)  # the decode loop passes its list: no copy
    rev = hist[::-1]  # a suffix match read right to left: list.index scans backwards at C speed
    for n in range(min(max_ngram, n_hist - 1), min_ngram - 1, -1):
        start = _best_start(hist, rev, n, max_len)
        if start is not None:
            return copy_with_overlap(hist, start + n, max_len)
    return []


def _best_start(hist: list[int], rev: list[int], n: int, max_len: int) -> int | None:
    """Start of the earlier occurrence of the last n tokens with the longest real continuation, or None.

    An occurrence starting at i (i + n <= len - 1: it ends before the suffix's last token) is followed by
    min(max_len, len - i - n) real tokens, so every i <= len - n - max_len ties at max_len and the latest of them
    wins; when none exists the earliest occurrence (closest to max_len real tokens) wins.
    """
    n_hist = len(hist)
    suffix, last = hist[n_hist - n:], n_hist - n - 1  # last: the latest start allowed
    full = n_hist - n - max_len  # starts at or before this have max_len real tokens after them
    if full >= 0:
        i = _latest(hist, rev, suffix, min(full, last))
        if i is not None:
            return i
    return _earliest(hist, suffix, max(0, full + 1), last)


def _latest(hist: list[int], rev: list[int], suffix: list[int], at_most: int) -> int | None:
    """Largest i <= at_most with hist[i:i + n] == suffix, scanning `rev` (hist reversed) left to right."""
    n_hist, n, first = len(hist), len(suffix), suffix[0]
    j = n_hist - 1 - at_most  # rev index of hist index at_most
    while True:
        try:
            j = rev.index(first, j)
        except ValueError:
            return None
        i = n_hist - 1 - j
        if hist[i:i + n] == suffix:
            return i
        j += 1


def _earliest(hist: list[int], suffix: list[int], lo: int, hi: int) -> int | None:
    """Smallest lo <= i <= hi with hist[i:i + n] == suffix."""
    n, first = len(suffix), suffix[0]
    i = lo
    while i <= hi:
        try:
            i = hist.index(first, i, hi + 1)
        except ValueError:
            return None
        if hist[i:i + n] == suffix:
            return i
        i += 1
    return None


def copy_with_overlap(hist: Sequence[int], at: int, max_len: int) -> list[int]:
    """hist[at:at + max_len], continued past the end by copying the copy itself (LZ77): out[k] = (hist + out)[at + k].

    Needs 0 <= at < len(hist); the tail hist[at:] then repeats with its own length as the period.
    """
    tail = list(hist[at:at + max_len])
    assert tail, "copy_with_overlap needs at least one token to copy"
    reps = -(-max_len // len(tail))
    return (tail * reps)[:max_len]


def copied(chain: Sequence[int], drafts: Sequence[int]) -> int:
    """How many of a step's accepted drafts (in order) the lookup chain had guessed: their common prefix length.

    The EAGLE-2 loop reads it as "a copy is in progress": after a step that accepted at least one copied token it
    drafts the next step with the chain alone (no head pass, a narrower verify), the way prompt lookup does, and
    goes back to the head as soon as a step copies nothing.
    """
    n = 0
    for a, b in zip(chain, drafts):
        if a != b:
            break
        n += 1
    return n
