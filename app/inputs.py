"""The input boundary of the playground: request limits, the one settings record, and value coercion.

Everything a request asks for arrives here, from the UI's event (preprocess=False: raw values) and from `/run`
(gr.api: unchecked JSON values) alike, and `prepare()` turns it into a fresh RunRecord and a core `DecodeConfig`, or
raises a `RequestError` (a ValueError with a one-line message and a title) that the handlers show as a gr.Error.
Pure: no gradio, no tensors.
"""
from dataclasses import dataclass
from types import MappingProxyType

from app.state import RunRecord
from core.conversation import check_messages, with_system
from core.engine.autotree import TreePlan
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
from core.engine.stops import check_stops
from core.prompt import PromptError, encode_messages, encode_prompt, prompt_limit

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


class RequestError(ValueError):
    """A request the app refuses: a one-line message for the user and the title its notice shows."""

    def __init__(self, message: str, title: str = "Invalid setting"):
        super().__init__(message)
        self.title = title


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


@dataclass(frozen=True)
class Served:
    """What a request is checked against: the model it will run on (its name, tokenizer and prompt mode, its
    context, the token-level lanes it has loaded, its planned trees, the visitor's head bound to it), and the system
    prompt of chat mode."""

    name: str
    tokenizer: object
    mode: str  # 'chat' (one user turn of the chat template) or 'raw' (core/prompt.py prompt_mode)
    trees: TreePlan
    compare: tuple[str, ...] = ()
    max_positions: int | None = None
    system: str | None = None
    head: str = ""  # the head folder a visitor bound to the model, "" for its own


def run_settings(prompt: str, cfg: DecodeConfig, compare: str) -> dict:
    """A request's resolved settings (the tree the run used, filled in from the plan), as links and records keep
    them: the keys are RunSettings' field names."""
    t, s = cfg.tree, cfg.sampling
    return {"prompt": prompt, "max_new_tokens": cfg.max_new_tokens, "temperature": s.temperature, "top_p": s.top_p,
            "seed": s.seed, "total_tokens": t.total_tokens, "depth": t.depth, "top_k": t.top_k, "lookup": t.lookup,
            "stop_below": t.stop_below, "compare": compare}


def tree_settings(planned: TreeConfig, given: tuple) -> tuple:
    """Tree settings a request left out (None, in RunSettings.TREE_FIELDS order) filled from `planned`."""
    return tuple(getattr(planned, f) if v is None else v for f, v in zip(RunSettings.TREE_FIELDS, given))


def conversation(settings: RunSettings, served: Served, limits: Limits) -> list[dict] | None:
    """A conversation turn's checked history, the prompt appended as the new user turn; None for a single prompt."""
    msgs = settings.messages
    if msgs is None:
        return None
    if isinstance(msgs, (list, tuple)) and settings.prompt.strip():
        msgs = [*msgs, {"role": "user", "content": settings.prompt}]
    try:
        convo = check_messages(msgs)
    except ValueError as e:
        raise RequestError(f"Invalid conversation: {e}", "Invalid messages") from None
    if served.mode != "chat":
        raise RequestError("A conversation needs a chat model; this one takes raw text (no chat template).",
                           "Invalid messages")
    chars = sum(len(m["content"]) for m in convo)
    if chars > limits.prompt_chars:
        raise RequestError(f"The conversation is {chars} characters; at most {limits.prompt_chars} are accepted. "
                           "Reset it to start again.", "Conversation too long")
    return convo


def checked_prompt(settings: RunSettings, limits: Limits) -> str:
    """The prompt text, refused when it is not text or longer than limits.prompt_chars (checked before strip() or
    the tokenizer touch a huge prompt)."""
    prompt = settings.prompt
    if not isinstance(prompt, str):
        raise RequestError(f"The prompt must be text, got {type(prompt).__name__}.", "Invalid prompt")
    if len(prompt) > limits.prompt_chars:
        raise RequestError(f"The prompt is {len(prompt)} characters; at most {limits.prompt_chars} are accepted.",
                           "Prompt too long")
    return prompt


def decode_config(settings: RunSettings, served: Served, limits: Limits) -> tuple[DecodeConfig, str, tuple]:
    """(DecodeConfig, third lane, stop strings) of a request, tree fields left out filled from the plan."""
    st = settings
    try:
        planned = limits.clamp(served.trees.for_temperature(as_float("temperature", st.temperature)))
        tree = tree_settings(planned, tuple(getattr(st, f) for f in RunSettings.TREE_FIELDS))
        cfg = make_config(st.max_new_tokens, st.temperature, st.top_p, st.seed, *tree, cap=limits.max_new_tokens,
                          limits=limits)
        compare = compare_choice(st.compare, served.compare)
        stops = check_stops(st.stop.split("\n") if isinstance(st.stop, str) else st.stop)
    except ValueError as e:
        raise RequestError(str(e), "Invalid setting") from None
    return cfg, compare, stops


def encoded(prompt: str, convo: list[dict] | None, served: Served) -> list[int]:
    """The prompt's ids through core/prompt.py (raw or the chat template), or the conversation's."""
    try:
        if convo is None:
            return encode_prompt(served.tokenizer, prompt, served.mode, served.system)
        return encode_messages(served.tokenizer, with_system(convo, served.system))
    except PromptError as e:  # e.g. "prompt encodes to no tokens"
        raise RequestError(f"The {e}.", "Empty prompt") from None
    except Exception as e:  # noqa: BLE001 - a tokenizer that refuses odd text (e.g. lone surrogates)
        raise RequestError(f"The prompt cannot be tokenized: {type(e).__name__}", "Invalid prompt") from None


def prepare(settings: RunSettings, served: Served, limits: Limits) -> tuple[RunRecord, DecodeConfig]:
    """One request's settings -> (fresh RunRecord, DecodeConfig), the one input check of the UI's event and `/run`;
    raises RequestError with a clear one-line message for anything outside `limits` or that `served` cannot run."""
    prompt = checked_prompt(settings, limits)
    convo = conversation(settings, served, limits)
    prompt = convo[-1]["content"] if convo is not None else prompt
    if not prompt.strip():
        raise RequestError("Enter a prompt first.", "Empty prompt")
    cfg, compare, stops = decode_config(settings, served, limits)
    ids = encoded(prompt, convo, served)
    limit = prompt_limit(served.max_positions, cfg, limits.prompt_tokens)  # the one fit rule (core/prompt.py)
    if len(ids) > limit:
        raise RequestError(f"The prompt is {len(ids)} tokens; at most {max(limit, 0)} fit with these settings.",
                           "Prompt too long")
    return RunRecord(prompt=prompt, prompt_ids=ids, greedy=cfg.sampling.greedy, tree_depth=cfg.tree.depth,
                     model=served.name, head=served.head, compare_kind=compare, messages=convo,
                     settings=run_settings(prompt, cfg, compare), stops=stops), cfg
