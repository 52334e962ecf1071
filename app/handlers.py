"""Event functions of the playground: validated inputs -> both decoders raced on one device -> rendered outputs.

No layout here (ui.py) and no per-user state held on the object: `Playground` only binds the loaded models, which
every session shares read-only; each request's events live in a RunRecord passed through gr.State.

The race: both generators run in one thread on one device, one step at a time, always advancing whichever method
has used less compute time so far (sum of StepEvent.step_ms, measured inside core). At any moment both panels show
what each method produced in the same compute time, so each grows at its true speed and UI work never enters a
measurement. (No `from __future__ import annotations` here: gr.api reads the /run signature's real types.)
"""
import dataclasses
import html
import json
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import gradio as gr

from app.plots import stats_figure, tree_figure
from app.render import (
    Detokenizer,
    baseline_html,
    eagle_html,
    identical_badge,
    panel_meta,
    stats_html,
    token_depths,
    token_lookup,
    token_label,
    token_steps,
)
from app.state import RunRecord
from core.autotree import TreePlan
from core.config import DecodeConfig, DecodeError, SamplingConfig, TreeConfig
from core.events import StepEvent, summarize
from core.exactness import Divergence, divergence_of, short_name
from core.pipeline import encode_prompt
from core.pipeline import prompt_mode as resolve_prompt_mode

MAX_NEW_TOKENS = 1024  # UI / API cap (core accepts more; this keeps a public demo responsive)
MAX_PROMPT_TOKENS = 4096
SIDES = ("baseline", "eagle")
OUTPUTS = ("baseline-output", "eagle-output", "stats", "stats-charts", "draft-tree", "step-slider", "state")
_TREE = TreeConfig()  # the engine's default tree (a Playground's TreePlan when none was planned)
log = logging.getLogger("eagle_playground.requests")


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
    temperature: float = 2.0
    top_p_min: float = 0.05
    seconds: float = 300.0  # wall-clock budget of one request's decoding; past it both methods stop cleanly
    queue: int = 32  # requests waiting at most (demo.queue(max_size=...)); more are told the server is busy


def user_error(message: str, title: str) -> gr.Error:
    """An expected, user-caused error: shown to that user (as text: Gradio renders messages as HTML) and logged as
    one line by the handler, without the traceback Gradio prints for faults."""
    return gr.Error(html.escape(message, quote=False), title=title, print_exception=False)


def short(value: object, n: int = 40) -> str:
    """repr() of a user value cut to n characters, so an error message stays one short line."""
    r = repr(value)
    return r if len(r) <= n else r[: n - 3] + "..."


OOM_TEXT = ("out of memory", "can't allocate memory", "not enough memory", "failed to allocate memory")


def is_oom(e: BaseException) -> bool:
    """MemoryError, torch's OutOfMemoryError (CUDA/MPS), or the plain RuntimeError torch raises when the CPU
    allocator fails ("DefaultCPUAllocator: can't allocate memory: you tried to allocate ..." / "not enough memory")."""
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if isinstance(e, MemoryError) or (oom is not None and isinstance(e, oom)):
        return True
    return isinstance(e, RuntimeError) and any(t in str(e).lower() for t in OOM_TEXT)


def log_rejected(endpoint: str, model: str, message: str) -> None:
    """One JSON line for a request refused at the input boundary (no traceback: the user's mistake, not a fault)."""
    log.info(json.dumps({"event": "request", "endpoint": endpoint, "model": model, "outcome": "rejected",
                         "error": message[:200]}, ensure_ascii=True))


def log_request(endpoint: str, record, seconds: float, outcome: str, error: str = "") -> None:
    """One JSON line per request: model, methods, token counts, time, tau, outcome; never the prompt text."""
    line = {"event": "request", "endpoint": endpoint, "model": record.model, "methods": list(SIDES),
            "prompt_tokens": len(record.prompt_ids), "seconds": round(seconds, 4), "outcome": outcome}
    for side in SIDES:
        st = summarize(getattr(record, side))
        line[f"{side}_new_tokens"] = st.new_tokens
        line[f"{side}_tau"] = round(st.tau, 4)
    if error:
        line["error"] = error
    log.info(json.dumps(line, ensure_ascii=True))


def race(gens: dict[str, Iterator[StepEvent]]) -> Iterator[tuple[str, StepEvent]]:
    """Interleave generators by compute time: next() the side with the smallest sum of step_ms (ties: dict order)."""
    spent = {k: 0.0 for k in gens}
    live = dict(gens)
    while live:
        side = min(live, key=lambda k: spent[k])
        ev = next(live[side], None)
        if ev is None:
            del live[side]
            continue
        spent[side] += ev.step_ms
        yield side, ev
        if ev.finished:
            del live[side]  # the caller closes every generator when the race ends or is closed


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


def within(name: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return value


def make_config(max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k, lookup=_TREE.lookup,
                cap: int = MAX_NEW_TOKENS, limits: Limits | None = None) -> DecodeConfig:
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
        lookup=within("lookup", as_int("context lookup", lookup), 0, lim.lookup))
    return DecodeConfig(max_new_tokens=n, sampling=sampling, tree=tree)


def step_slider(n_steps: int) -> gr.Slider:
    """The tree-step slider for a request with n_steps verify steps (disabled until there are two to scrub)."""
    if n_steps < 2:
        return gr.Slider(minimum=0, maximum=1, value=n_steps, step=1, interactive=False,
                         label="Draft tree of verify step (scrub after the run)")
    return gr.Slider(minimum=1, maximum=n_steps, value=n_steps, step=1, interactive=True,
                     label=f"Draft tree of verify step (1–{n_steps})")


def gpu_seconds(max_new_tokens: int) -> int:
    """ZeroGPU reservation for one request (both methods, generous for a 270M-1B target)."""
    return int(min(300, 20 + 0.12 * max_new_tokens))


def spaces_module():
    """The Hugging Face `spaces` package (ZeroGPU) when installed, else None; imported only when present."""
    try:
        import spaces  # type: ignore
    except ImportError:
        return None
    return spaces


class Playground:
    """The loaded tokenizer and decoders bound to the app's event functions."""

    def __init__(self, tokenizer, baseline, eagle, *, text_every: float = 0.1, plot_every: float = 0.5,
                 charts_every: float = 2.0, max_new_tokens: int | None = None,
                 max_prompt_tokens: int | None = None, prompt_mode: str = "auto", system: str | None = None,
                 limits: Limits | None = None, trees: TreePlan | None = None):
        self.tok, self.baseline, self.eagle = tokenizer, baseline, eagle
        # the tree a request gets unless it sets one: per sampling regime (greedy / sampled), shared by UI and /run
        self.trees = trees or TreePlan.fixed(_TREE, "engine default")
        self.mode = resolve_prompt_mode(tokenizer, prompt_mode)  # 'chat' (user turn) or 'raw'; shown in the UI
        self.system = system
        self.text_every, self.plot_every, self.charts_every = text_every, plot_every, charts_every
        lim = limits or Limits()
        self.limits = dataclasses.replace(lim, max_new_tokens=max_new_tokens or lim.max_new_tokens,
                                          prompt_tokens=max_prompt_tokens or lim.prompt_tokens)
        self.cap, self.prompt_cap = self.limits.max_new_tokens, self.limits.prompt_tokens
        self.queue = None  # the app's gradio Queue, set by build_demo: lets a request notice its client has gone
        target = getattr(baseline, "target", None)
        self.model = str(getattr(target, "name", "") or type(target).__name__ if target is not None else "unknown")
        self.dtype = getattr(target, "dtype", "float32")  # the near-tie tolerance of a divergence (core/exactness.py)
        self._labels: dict[int, str] = {}  # token id -> tree label; a pure tokenizer cache, not user data
        spaces = spaces_module()
        self.zero_gpu = spaces is not None
        self._race = self._race_steps  # GPU work; on ZeroGPU wrapped so a GPU is attached for its duration
        if spaces is not None:
            self._race = spaces.GPU(duration=lambda prompt_ids, cfg, *_: gpu_seconds(cfg.max_new_tokens))(self._race)

    # ---------------------------------------------------------------------------------- the device work

    def _race_steps(self, prompt_ids: list[int], cfg: DecodeConfig,
                    should_stop: Callable[[], bool] | None = None) -> Iterator[tuple[str, StepEvent]]:
        """Both decoders raced step by step until done or should_stop(); closing this generator stops both too."""
        closed = [False]

        def stop() -> bool:
            return closed[0] or bool(should_stop and should_stop())

        gens = {"baseline": self.baseline.generate(prompt_ids, cfg, stop),
                "eagle": self.eagle.generate(prompt_ids, cfg, stop)}
        try:
            yield from race(gens)
        finally:
            closed[0] = True
            for g in gens.values():
                g.close()  # runs the decoders' finally blocks: caches freed now, not at garbage collection

    def _steps(self, record: RunRecord, cfg: DecodeConfig,
               gone: Callable[[], bool] = lambda: False) -> Iterator[tuple[str, StepEvent]]:
        """The race for one request. The decoders check after every step whether to stop: the Stop button flipped
        record.stop, the client has gone (`gone`), or the request's wall-clock budget is spent, which sets
        record.note. (On ZeroGPU the race runs in a forked worker that cannot see these; Stop then cancels the
        event and the reservation's duration bounds the time.)"""
        deadline = time.monotonic() + self.limits.seconds

        def should_stop() -> bool:
            if record.stop or gone():
                return True
            if time.monotonic() >= deadline:
                record.note = (f"Stopped after the {self.limits.seconds:g} s time budget per request; the text and "
                               "statistics so far are shown.")
                return True
            return False

        return self._race(record.prompt_ids, cfg, None if self.zero_gpu else should_stop)

    def client_gone(self, request: gr.Request | None, api_name: str) -> Callable[[], bool]:
        """A check that turns true once the client of this queued request has disconnected or cancelled it.

        Gradio marks a running event `alive = False` when its client's stream closes, and drops it from the active
        jobs when it is cancelled; a plain (non-generator) function is never told either, so `/run` asks. This reads
        Gradio's queue (no public API for it); when the event cannot be found (a direct call, another Gradio) the
        check stays false and the request simply runs to its end or its time budget."""
        session = getattr(request, "session_hash", None)
        queue = self.queue
        if queue is None or session is None:
            return lambda: False

        def active() -> list:
            return [ev for job in list(getattr(queue, "active_jobs", None) or []) if job for ev in job]

        mine = [ev for ev in active() if getattr(ev, "session_hash", None) == session
                and getattr(getattr(ev, "fn", None), "api_name", None) == api_name]
        if len(mine) != 1:
            return lambda: False
        event = mine[0]
        return lambda: not getattr(event, "alive", True) or not any(ev is event for ev in active())

    # ---------------------------------------------------------------------------------- input boundary

    def prepare(self, prompt, max_new_tokens, temperature, top_p, seed, total_tokens=None, depth=None, top_k=None,
                lookup=None, endpoint: str = "run"):
        """Validate inputs -> (fresh RunRecord, DecodeConfig), the one input check of the UI's event and `/run`;
        raises gr.Error with a clear one-line message (and logs one line) for anything outside self.limits."""
        try:
            return self._prepare(prompt, max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k,
                                 lookup)
        except gr.Error as e:
            log_rejected(endpoint, self.model, str(e))
            raise

    def _prepare(self, prompt, max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k, lookup):
        if not isinstance(prompt, str):
            raise user_error(f"The prompt must be text, got {type(prompt).__name__}.", "Invalid prompt")
        if len(prompt) > self.limits.prompt_chars:  # before strip() or the tokenizer touch a huge prompt
            raise user_error(f"The prompt is {len(prompt)} characters; at most {self.limits.prompt_chars} are "
                             "accepted.", "Prompt too long")
        if not prompt.strip():
            raise user_error("Enter a prompt first.", "Empty prompt")
        try:
            total_tokens, depth, top_k, lookup = self.tree_settings(temperature, total_tokens, depth, top_k, lookup)
            cfg = make_config(max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k, lookup,
                              cap=self.cap, limits=self.limits)
        except ValueError as e:
            raise user_error(str(e), "Invalid setting") from None
        try:
            ids = self.encode(prompt)
        except Exception as e:  # noqa: BLE001 - a tokenizer that refuses odd text (e.g. lone surrogates)
            raise user_error(f"The prompt cannot be tokenized: {type(e).__name__}", "Invalid prompt") from None
        if not ids:
            raise user_error("The prompt encodes to no tokens.", "Empty prompt")
        limit = self.prompt_cap
        max_pos = getattr(getattr(self.baseline, "target", None), "max_positions", None)
        if max_pos:
            limit = min(limit, max_pos - cfg.max_new_tokens - cfg.tree.reach - 1)
        if len(ids) > limit:
            raise user_error(f"The prompt is {len(ids)} tokens; at most {max(limit, 0)} fit with these settings.",
                             "Prompt too long")
        record = RunRecord(prompt=prompt, prompt_ids=ids, greedy=cfg.sampling.greedy, tree_depth=cfg.tree.depth,
                           model=self.model)
        return record, cfg

    def tree_settings(self, temperature, total_tokens=None, depth=None, top_k=None, lookup=None) -> tuple:
        """Tree settings a request left out (None) filled from the tree planned for its temperature's regime."""
        planned = self.trees.for_temperature(as_float("temperature", temperature))
        given = (total_tokens, depth, top_k, lookup)
        return tuple(getattr(planned, f) if v is None else v
                     for f, v in zip(("total_tokens", "depth", "top_k", "lookup"), given))

    def planned_tree(self, temperature, touched: bool):
        """UI: the temperature moved; the tree sliders follow the plan for its regime until the user moves them."""
        try:
            t = as_float("temperature", temperature)
        except ValueError:
            t = None
        if touched or t is None:
            return [gr.skip()] * 4
        tree = self.trees.for_temperature(t)
        lim = self.limits
        return [min(tree.total_tokens, lim.total_tokens), min(tree.depth, lim.depth), min(tree.top_k, lim.top_k),
                min(tree.lookup, lim.lookup)]

    @contextmanager
    def guarded(self, endpoint: str, record: RunRecord):
        """Around one request's device work: decode failures and out-of-memory become a gr.Error for this request
        only (the decoders' finally blocks have freed the caches by then); one log line per request."""
        t0, outcome, error = time.perf_counter(), "ok", ""
        try:
            yield
        except DecodeError as e:
            outcome, error = "error", str(e)
            raise gr.Error(str(e), title="Generation failed") from None
        except GeneratorExit:
            outcome = "stopped"
            raise
        except Exception as e:
            if not is_oom(e):
                outcome, error = "error", type(e).__name__
                raise
            outcome, error = "error", f"out of memory ({type(e).__name__})"
            raise gr.Error("Out of memory for this request; try fewer new tokens or a shorter prompt.",
                           title="Out of memory", print_exception=False) from None
        except BaseException as e:
            outcome, error = "error", type(e).__name__
            raise
        finally:
            if outcome == "ok" and record.note:
                outcome = "timeout"
            if outcome == "ok" and record.stop:
                outcome = "stopped"
            if outcome == "ok" and not (record.finished("baseline") and record.finished("eagle")):
                outcome = "stopped"
            log_request(endpoint, record, time.perf_counter() - t0, outcome, error)

    # ---------------------------------------------------------------------------------- UI events

    def stream(self, prompt, max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k,
               lookup=_TREE.lookup, request: gr.Request = None):
        """Run button: stream both panels as a race. Text refreshes at most every text_every s, the draft tree every
        plot_every s and the charts every charts_every s (plotly re-renders are what costs the browser most)."""
        record, cfg = self.prepare(prompt, max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k,
                                   lookup, endpoint="stream")
        gone = self.client_gone(request, "stream")
        det = {s: Detokenizer(self.tok, record.prompt_ids) for s in SIDES}
        yield self._view(record, det, running=True, tree=True, charts=True)
        last = dict.fromkeys(("text", "tree", "charts"), time.monotonic())
        every = {"text": self.text_every, "tree": self.plot_every, "charts": self.charts_every}
        with self.guarded("stream", record):
            steps = self._steps(record, cfg, gone)
            try:
                for side, ev in steps:
                    getattr(record, side).append(ev)
                    det[side].add(ev.new_token_ids)
                    now = time.monotonic()
                    due = {k: now - last[k] >= every[k] for k in last}
                    if any(due.values()):
                        last.update({k: now for k, d in due.items() if d})
                        yield self._view(record, det, running=True, tree=due["tree"], charts=due["charts"])
            finally:
                steps.close()  # cancel / tab closed: both decoders' finally blocks free their caches now
        for d in det.values():
            d.flush()
        if record.note:
            gr.Warning(record.note)
        yield self._view(record, det, running=False, tree=True, charts=True, final=True)

    def finish(self, record: RunRecord | None):
        """Stop button: ask the running request to stop after its current step, and show what it produced.
        (After a run the state holds only its compact record, with no events: then there is nothing to stop.)"""
        if not record or not (record.baseline or record.eagle):
            return (gr.skip(),) * len(OUTPUTS)
        record.stop = True
        record.baseline, record.eagle = list(record.baseline), list(record.eagle)  # snapshot
        det = {s: Detokenizer(self.tok, record.prompt_ids) for s in SIDES}
        for s in SIDES:
            det[s].add(record.ids(s))
            det[s].flush()
        return self._view(record, det, running=False, tree=True, charts=True, final=True)

    def show_step(self, record: RunRecord | None, step):
        """Step slider: the draft tree of verify step `step` (1-based) of the last request."""
        n = record.tree_count if record else 0
        if not n:
            return tree_figure(None, self.label)
        i = min(max(int(step or 1), 1), n)
        ev = record.tree_step(i - 1)
        return tree_figure(ev, self.label, title=f"Step {i} of {n}: {len(ev.tree) - 1} drafted, "
                                                 f"{ev.accepted_drafts} accepted + 1 target token")

    @staticmethod
    def _tree_title(steps: list[StepEvent], running: bool) -> str:
        if not steps:
            return ""
        last = steps[-1]
        where = f"Step {len(steps)} (live)" if running else f"Step {len(steps)} of {len(steps)}"
        return f"{where}: {len(last.tree) - 1} drafted, {last.accepted_drafts} accepted + 1 target token"

    def encode(self, prompt: str) -> list[int]:
        """Prompt text -> ids: raw text for base models, one user turn of the chat template for chat models."""
        if self.mode == "chat":
            return encode_prompt(self.tok, prompt, "chat", self.system)
        return list(self.tok.encode(prompt))

    def label(self, token_id: int) -> str:
        if token_id not in self._labels:
            self._labels[token_id] = token_label(self.tok.decode([token_id], skip_special_tokens=False))
        return self._labels[token_id]

    def _view(self, record: RunRecord, det: dict[str, Detokenizer], running: bool, tree: bool, charts: bool,
              final: bool = False) -> tuple:
        """All outputs (in OUTPUTS order) for the current record."""
        stats = {s: summarize(getattr(record, s)) for s in SIDES}
        done = {s: record.finished(s) for s in SIDES}
        base = baseline_html(record.prompt, det["baseline"].text,
                             panel_meta(stats["baseline"], running and not done["baseline"], done["baseline"]))
        eagle = eagle_html(record.prompt, det["eagle"].pieces, det["eagle"].ids, token_depths(record.eagle),
                           token_steps(record.eagle),
                           panel_meta(stats["eagle"], running and not done["eagle"], done["eagle"]),
                           legend_depth=record.tree_depth, lookup=token_lookup(record.eagle))
        badge = identical_badge(record.ids("baseline"), record.ids("eagle"), record.greedy,
                                complete=done["baseline"] and done["eagle"], divergence=self._divergence(record),
                                dtype=short_name(self.dtype))
        table = stats_html(stats["baseline"], stats["eagle"], badge)
        steps = record.tree_steps
        charts = stats_figure(stats["baseline"], stats["eagle"]) if charts else gr.skip()
        tree = tree_figure(steps[-1] if steps else None, self.label,
                           title=self._tree_title(steps, running)) if tree else gr.skip()
        if final:
            slider = step_slider(len(steps))
        elif running and not record.baseline and not record.eagle:
            slider = step_slider(0)
        else:
            slider = gr.skip()
        # while running, the state holds the live record (Stop flips its flag); afterwards only its compact form
        return base, eagle, table, charts, tree, slider, record.compact() if final else record

    def _divergence(self, record: RunRecord) -> Divergence | None:
        """Where greedy outputs part ways and whether a near tie explains it, from the recorded margins."""
        return divergence_of(record.baseline, record.eagle, self.dtype) if record.greedy else None

    # ---------------------------------------------------------------------------------- API

    def run(self, prompt: str, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
            seed: int = 0, total_tokens: int | None = None, depth: int | None = None,
            top_k: int | None = None, lookup: int | None = None, request: gr.Request = None) -> dict:
        """Generate `prompt` with plain decoding and EAGLE-2; return both texts, whether the token ids are
        identical, each method's statistics and the speedup (EAGLE-2 tokens/s over baseline tokens/s). Tree
        settings left out take the tree the UI would show for this temperature (planned per regime by `--tree
        auto`); `tree` in the result says which tree ran. At T = 0,
        `divergence` says where outputs that differ part ways (index, both top-2 margins, near_tie, tolerance,
        label, dtype; core/exactness.py), else None. `note` says why a run stopped early (the time budget per
        request), else it is empty."""
        record, cfg = self.prepare(prompt, max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k,
                                   lookup, endpoint="run")
        with self.guarded("run", record):
            steps = self._steps(record, cfg, self.client_gone(request, "run"))
            try:
                for side, ev in steps:
                    getattr(record, side).append(ev)
            finally:
                steps.close()
        stats = {s: summarize(getattr(record, s)) for s in SIDES}
        b, e = stats["baseline"].tokens_per_s, stats["eagle"].tokens_per_s
        div = self._divergence(record)
        return {
            "baseline_text": self.tok.decode(record.ids("baseline"), skip_special_tokens=True),
            "eagle_text": self.tok.decode(record.ids("eagle"), skip_special_tokens=True),
            "identical": record.ids("baseline") == record.ids("eagle"),
            # first differing token, both runs' top-2 margins there, near_tie (core/exactness.py); None if none
            "divergence": div.as_dict() | {"dtype": short_name(self.dtype)} if div else None,
            "greedy": record.greedy,
            "baseline_token_ids": record.ids("baseline"),
            "eagle_token_ids": record.ids("eagle"),
            "baseline": stats["baseline"].as_dict(),
            "eagle": stats["eagle"].as_dict(),
            "speedup": e / b if b else 0.0,
            "tree": dataclasses.asdict(cfg.tree),
            "note": record.note,
        }


def auto_or_parse(spec: str | None, eagle, tokenizer) -> TreePlan:
    """--tree: None keeps the engine default; 'T,D,K[,L]' is used for every request; 'auto' measures this machine
    once and plans one tree for greedy requests and one for sampled ones (core/autotree.py)."""
    if not spec:
        return TreePlan.fixed(_TREE, "engine default")
    if spec != "auto":
        return TreePlan.fixed(TreeConfig.parse(spec), "given")
    from core.autotree import plan_regimes

    plan, reports = plan_regimes(eagle, tokenizer("The history of the printing press").input_ids, max_new_tokens=48)
    logging.getLogger("eagle_playground").info(
        "auto tree: greedy %s, sampled %s (verify ms by tree size %s)", plan.greedy, plan.sampled,
        {n: round(v, 1) for n, v in reports["greedy"].verify_ms.items()})
    return plan


def warm_up(tokenizer, baseline, eagle, tokens: int = 8) -> None:
    """One short greedy generation per method so the first user's timings exclude one-off start-up costs."""
    ids = list(tokenizer.encode("The quick brown fox"))
    cfg = DecodeConfig(max_new_tokens=tokens)
    for dec in (baseline, eagle):
        for _ in dec.generate(ids, cfg, None):
            pass
