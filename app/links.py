"""Links that reproduce a run: the prompt, the model, the head and every setting in the page's URL query.

`?prompt=Once+upon&model=gemma-3-270m&max_new_tokens=64&temperature=0&...&compare=lookup` fills the page on load
(`from_query`, read by a demo.load event from gr.Request.query_params); the "copy link" button builds the same query
in the browser from the current values (`COPY_JS`, one key per LINK_FIELDS entry, in that order) and copies it to the
clipboard. A value out of range or of the wrong type is left at the page's default and named in a note, so a
hand-edited link never breaks the page. The model opens as the visitor's own choice; a `head` (the folder a run's
head was read from) fills the picker's head box, bound only when the visitor presses "Use this head". Pure parsing
here; the wiring is in app/panels.py.
"""
from __future__ import annotations

import json
from typing import Mapping

from app.inputs import Limits

# the URL keys (RunSettings' names, then the model and head); the copy button's inputs are wired in this order
LINK_FIELDS = ("prompt", "max_new_tokens", "temperature", "top_p", "seed", "total_tokens", "depth", "top_k",
               "lookup", "stop_below", "compare", "model", "head")
MAX_HEAD_PATH = 1024


def _ranges(lim: Limits) -> dict[str, tuple[type, float, float]]:
    return {"max_new_tokens": (int, 1, lim.max_new_tokens), "temperature": (float, 0.0, lim.temperature),
            "top_p": (float, lim.top_p_min, 1.0), "seed": (int, 0, 2**53), "total_tokens": (int, 1, lim.total_tokens),
            "depth": (int, 1, lim.depth), "top_k": (int, 1, lim.top_k), "lookup": (int, 0, lim.lookup),
            "stop_below": (float, 0.0, lim.stop_below)}


def from_query(query: Mapping[str, str], limits: Limits, compare: tuple[str, ...] = ("none",),
               models: tuple[str, ...] = ()) -> tuple[dict, list[str]]:
    """URL query -> (values by LINK_FIELDS key for the keys given and valid, notes on the ones ignored)."""
    values, notes = {}, []
    ranges = _ranges(limits)
    for key in LINK_FIELDS:
        if key not in query:
            continue
        raw = str(query[key])
        if key == "head":
            if len(raw) > MAX_HEAD_PATH:
                notes.append(f"head path longer than {MAX_HEAD_PATH} characters")
            else:
                values[key] = raw
        elif key == "prompt":
            if len(raw) > limits.prompt_chars:
                notes.append(f"prompt longer than {limits.prompt_chars} characters")
            else:
                values[key] = raw
        elif key in ("compare", "model"):
            allowed = compare if key == "compare" else models
            if raw in allowed:
                values[key] = raw
            else:
                notes.append(f"{key} {raw!r} is not offered here")
        else:
            kind, low, high = ranges[key]
            try:
                number = float(raw)
                if kind is int and number != int(number):
                    raise ValueError
                value = kind(number)
            except (ValueError, OverflowError):
                notes.append(f"{key} {raw!r} is not a number")
                continue
            if low <= value <= high:
                values[key] = value
            else:
                notes.append(f"{key} {raw} is outside {low:g}..{high:g}")
    return values, notes


def copy_js(keys: tuple[str, ...]) -> str:
    """JS for the copy button: builds the link from the current values (inputs wired in `keys` order), copies it and
    returns it, so it is also shown (clipboard access is refused on plain-http pages other than localhost)."""
    return COPY_JS % json.dumps(list(keys))


COPY_JS = """
(...values) => {
  const keys = %s;
  const url = new URL(window.location.href);
  url.search = "";
  url.hash = "";
  keys.forEach((k, i) => {
    const v = values[i];
    if (v !== null && v !== undefined && v !== "") url.searchParams.set(k, String(v));
  });
  const link = url.toString();
  if (navigator.clipboard) navigator.clipboard.writeText(link).catch(() => {});
  return link;
}
"""
