"""The input boundary of the playground: request limits, the one settings record, and value coercion.

Everything a request asks for arrives here, from the UI's event (preprocess=False: raw values) and from `/run`
(gr.api: unchecked JSON values) alike, and leaves as a `RunSettings` record and a core `DecodeConfig`, or as a
user-readable one-line error.
"""
import html
from dataclasses import dataclass
from types import MappingProxyType

import gradio as gr

from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig

MAX_NEW_TOKENS = 1024  # UI / API cap (core accepts more; this keeps a public demo responsive)
MAX_PROMPT_TOKENS = 4096
DEFAULT_TREE = TreeConfig()  # the engine's default tree (a Playground's TreePlan when none was planned)
# the third lane: a token-level drafter raced beside EAGLE-2 ("none": the two-lane view)
COMPARE = MappingProxyType({"none": "two lanes: plain decoding and EAGLE-2",
                            "medusa": "Medusa head (token-level: guesses tokens t+2.. from the last feature)",
                            "lookup": "prompt lookup (token-level: copies what followed the same words earlier)"})


@dataclass(frozen=True)
class RunSettings:
    """One request's settings as the user gave them (tree fields None = the planned tree for the temperature;
    compare "none" = two lanes). The UI's inputs, in this field order, and `/run`'s keyword arguments."""

    prompt: object
    max_new_tokens: object = 128
    temperature: object = 0.0
    top_p: object = 1.0
    seed: object = 0
    total_tokens: object = None
    depth: object = None
    top_k: object = None
    lookup: object = None
    compare: object = "none"
    stop_below: object = None  # after compare: positional /run callers of earlier versions keep their meaning
    messages: object = None  # the conversation before this turn ({role, content} list; core/conversation.py) or None
    stop: object = None  # stop strings: a list, or text with one per line (core/engine/stops.py); last, for the same reason

    TREE_FIELDS = ("total_tokens", "depth", "top_k", "lookup", "stop_below")


@dataclass(frozen=True)
class Limits:
    """What one request may ask for, at every door: the UI's sliders are built from these maxima and the UI's event
    and `/run` validate against them in one place (Gradio range-checks sliders only for the UI's own endpoint;
    gr.api inputs arrive unchecked). Core's own limits are wider; these keep one request to minutes of CPU."""

    max_new_tokens: int = MAX_NEW_TOKENS
    prompt_tokens: int = MAX_PROMPT_TOKENS
    prompt_chars: int = 65_536  # checked before tokenizing: a many-megabyte prompt never reaches the tokenizer
    total_tokens: int = 128  # tree nodes verified per step, root included
    depth: int = 12
    top_k: int = 16
    lookup: int = 32
    stop_below: float = 0.9  # dynamic depth's threshold (TreeConfig.stop_below; core allows up to 1)
    temperature: float = 2.0
    top_p_min: float = 0.05
    seconds: float = 300.0  # wall-clock budget of one request's decoding; past it both methods stop cleanly
    queue: int = 32  # requests waiting at most (demo.queue(max_size=...)); more are told the server is busy
    queue_wait: float = 600.0  # deadline: a request that waited longer for its turn is answered "busy", not run

    def clamp(self, tree: TreeConfig) -> TreeConfig:
        """A planned tree within these limits (`app.py --tree 200,6,6` or an `auto` plan wider than a request may
        ask): the sliders show it and a request that leaves tree fields out runs it, so it must pass validation."""
        return TreeConfig(min(tree.total_tokens, self.total_tokens), min(tree.depth, self.depth),
                          min(tree.top_k, self.top_k), min(tree.lookup, self.lookup),
                          min(tree.stop_below, self.stop_below))


def user_error(message: str, title: str) -> gr.Error:
    """An expected, user-caused error: shown to that user (as text: Gradio renders messages as HTML) and logged as
    one line by the handler, without the traceback Gradio prints for faults."""
    return gr.Error(html.escape(message, quote=False), title=title, print_exception=False)


def short(value: object, n: int = 40) -> str:
    """repr() of a user value cut to n characters, so an error message stays one short line."""
    r = repr(value)
    return r if len(r) <= n else r[: n - 3] + "..."


def as_int(name: str, value: object) -> int:
    """Accept ints and integral floats (sliders and JSON clients send 128.0); reject the rest with a message."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a whole number, got {short(value)}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name} must be a whole number, got {value}")
    return int(value)


def as_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {short(value)}")
    return float(value)


def fraction(name: str, value: float, high: float) -> float:
    """A probability threshold in [0, high] (the slider's range), else ValueError with the range."""
    if not 0.0 <= value <= high:  # also refuses NaN
        raise ValueError(f"{name} must be between 0 and {high:g}, got {value:g}")
    return value


def within(name: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return value


def make_config(max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k, lookup=DEFAULT_TREE.lookup,
                stop_below=DEFAULT_TREE.stop_below, cap: int = MAX_NEW_TOKENS,
                limits: Limits | None = None) -> DecodeConfig:
    """UI values -> DecodeConfig within `limits` (the UI's maxima; `cap` overrides max new tokens); raises
    ValueError with a user-readable message. Core then checks types, finiteness and its own wider ranges."""
    lim = limits or Limits()
    n = within("max new tokens", as_int("max new tokens", max_new_tokens), 1, cap)
    t, top_p = as_float("temperature", temperature), as_float("top-p", top_p)
    if t > lim.temperature:
        raise ValueError(f"temperature must be in [0, {lim.temperature:g}], got {t:g}")
    if top_p < lim.top_p_min and top_p > 0:
        raise ValueError(f"top_p must be in [{lim.top_p_min:g}, 1], got {top_p:g}")
    sampling = SamplingConfig(temperature=t, top_p=top_p, seed=as_int("seed", seed))
    tree = TreeConfig(
        total_tokens=within("total_tokens", as_int("tree total tokens", total_tokens), 1, lim.total_tokens),
        depth=within("depth", as_int("tree depth", depth), 1, lim.depth),
        top_k=within("top_k", as_int("tree top-k", top_k), 1, lim.top_k),
        lookup=within("lookup", as_int("context lookup", lookup), 0, lim.lookup),
        stop_below=fraction("stop below", as_float("stop below", stop_below), lim.stop_below))
    return DecodeConfig(max_new_tokens=n, sampling=sampling, tree=tree)




def compare_choice(value: object, available: tuple[str, ...]) -> str:
    """The third lane asked for: one of COMPARE's keys that this app has loaded, else ValueError."""
    if value is None:
        return "none"
    if not isinstance(value, str) or value not in COMPARE:
        raise ValueError(f"compare must be one of {', '.join(COMPARE)}, got {short(value)}")
    if value != "none" and value not in available:
        raise ValueError(f"compare {value!r} is not available here (loaded: {', '.join(available) or 'none'})")
    return value
