"""Stop strings: end a generation once its text contains one of them, for any decoder, on token ids.

Decoders work on token ids and never see text, so stop strings wrap a decoder's event stream: after each step the
text of the newest tokens is decoded (a window wide enough for the longest stop string), and at the first token
whose text completes a stop string the step is cut after that token, marked finished, and the decoder's generator
is closed (its finally frees its caches). Like transformers' `stop_strings`, the stop string stays in the output.
The cut is made per token, so an EAGLE step that accepted drafts past the stop string keeps exactly the tokens plain
decoding would have produced: greedy outputs stay token-identical.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Sequence

from core.engine.events import StepEvent

MAX_STOPS = 4  # stop strings per request
MAX_STOP_CHARS = 64  # characters per stop string
WINDOW_SLACK = 8  # extra tokens decoded beyond the longest stop string (tokens of zero or partial characters)


def check_stops(stops: object) -> tuple[str, ...]:
    """A request's stop strings as a tuple: None / "" / [] -> (); a string or a list of strings, each non-empty and
    at most MAX_STOP_CHARS characters, at most MAX_STOPS of them; else ValueError with a one-line message."""
    if stops is None or stops == "":
        return ()
    if isinstance(stops, str):
        stops = [stops]
    if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) for s in stops):
        raise ValueError("stop must be a string or a list of strings")
    out = tuple(s for s in stops if s != "")
    if len(out) > MAX_STOPS:
        raise ValueError(f"at most {MAX_STOPS} stop strings, got {len(out)}")
    if any(len(s) > MAX_STOP_CHARS for s in out):
        raise ValueError(f"a stop string may have at most {MAX_STOP_CHARS} characters")
    return out


def stop_at(events: Iterator[StepEvent], decode: Callable[[list[int]], str],
            stops: Sequence[str]) -> Iterator[StepEvent]:
    """`events` (one decoder's step records) until the generated text contains a stop string; the step that
    completes one is cut after the completing token and marked finished. `decode(ids) -> text` is the tokenizer's.
    Without stop strings the events pass through unchanged."""
    if not stops:
        yield from events
        return
    window = max(len(s) for s in stops) + WINDOW_SLACK
    ids: list[int] = []
    try:
        for ev in events:
            for k, tok in enumerate(ev.new_token_ids):
                ids.append(tok)
                tail = decode(ids[-window:])
                if any(s in tail for s in stops):
                    yield cut(ev, k + 1)
                    return
            yield ev
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()


def cut(ev: StepEvent, n: int) -> StepEvent:
    """The step's first n tokens (margins and top logits alike), marked finished."""
    return dataclasses.replace(ev, new_token_ids=ev.new_token_ids[:n], margins=ev.margins[:n],
                               top_logits=ev.top_logits[:n], finished=True)
