"""Event functions of the playground: one validated RunSettings -> the lanes raced on one device -> rendered outputs.

No layout here (ui.py), no input coercion (inputs.py), no race or ZeroGPU plumbing (race.py), no start-up work
(startup.py), and no per-user state held on the object: `Playground` only binds the loaded models, which every
session shares read-only; each request's events live in a RunRecord passed through gr.State. Outputs are built as
a dict keyed by component id (`OUTPUTS` is the one order ui.py wires them in).
Input checks are app/inputs.py's `prepare` (refusals mapped to gr.Error here), a finished run's record is
app/result.py's, the lanes' titles and slots app/lanes.py's.
(No `from __future__ import annotations` here: gr.api reads the /run signature's real types.)
"""
import dataclasses
import html
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import gradio as gr

from app.inputs import DEFAULT_TREE, Limits, RequestError, RunSettings, Served, as_float, prepare, short
from app.lanes import lane_title
from app.plots import stats_figure, tree_figure
from app.race import is_oom, log_rejected, log_request, race
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
from app.history import finished_run
from app.result import api_result, lane_stats, run_result
from app.picker import Bundle, Models
from app.state import Choice, RunRecord
from app.zerogpu import gpu_seconds, spaces_module
from core.conversation import answered
from core.engine.autotree import TreePlan
from core.engine.config import DecodeConfig, DecodeError
from core.engine.events import StepEvent
from core.engine.exactness import divergence_of, short_name
from core.models import choices
from core.engine.eagle import NON_FINITE_DRAFT_NOTE
from core.lanes import Lane
from core.engine.stops import stop_at
from core.prompt import encode_prompt
from core.prompt import prompt_mode as resolve_prompt_mode

OUTPUTS = ("baseline-output", "eagle-output", "stats", "stats-charts", "draft-tree", "step-slider",
           "compare-output", "compare-tree", "state")  # the two-lane outputs first, the third lane's after, state last


def user_error(message: str, title: str) -> gr.Error:
    """An expected, user-caused error: shown to that user (as text: Gradio renders messages as HTML) and logged as
    one line by the handler, without the traceback Gradio prints for faults."""
    return gr.Error(html.escape(message, quote=False), title=title, print_exception=False)


def ordered(view: dict) -> tuple:
    """A view keyed by component id -> the tuple Gradio expects, in OUTPUTS order (gr.skip() for ids left out)."""
    return tuple(view.get(k, gr.skip()) for k in OUTPUTS)


def step_slider(n_steps: int) -> gr.Slider:
    """The tree-step slider for a request with n_steps verify steps (disabled until there are two to scrub)."""
    if n_steps < 2:
        return gr.Slider(minimum=0, maximum=1, value=n_steps, step=1, interactive=False,
                         label="Draft tree of verify step (scrub after the run)")
    return gr.Slider(minimum=1, maximum=n_steps, value=n_steps, step=1, interactive=True,
                     label=f"Draft tree of verify step (1–{n_steps})")


def noted(record: RunRecord, steps: Iterator[tuple[str, StepEvent]]) -> Iterator[tuple[str, StepEvent]]:
    """The race's steps, unchanged, with a step's engine note (a head whose draft scores were NaN or inf, answered
    with the target's own token) copied once into record.note, so the UI warns and `/run` returns it."""
    try:
        for side, ev in steps:
            if ev.note == NON_FINITE_DRAFT_NOTE and NON_FINITE_DRAFT_NOTE not in record.note:
                record.note = f"{record.note} {NON_FINITE_DRAFT_NOTE}.".strip()
            yield side, ev
    finally:
        steps.close()


class Playground:
    """The loaded tokenizer and decoders bound to the app's event functions. `compare`: the token-level decoders a
    request may race as a third lane, by COMPARE key ("medusa", "lookup"; app/startup.py compare_decoders).
    `verify_ms`: verify cost by tree size on this machine (core.engine.autotree.verify_profile), for the "why this
    speedup" what-if of every finished run (app/why.py). The model given is the start-up model, what a session
    runs on until it chooses another: `offered` the preset names a session (or `/run`'s `model=`) may choose,
    `loader` preset name -> Bundle, `max_loaded` the most bundles in memory at once (app/picker.py `Models`)."""

    def __init__(self, tokenizer, baseline, eagle, *, compare: dict | None = None, text_every: float = 0.1,
                 plot_every: float = 0.5, charts_every: float = 2.0, max_new_tokens: int | None = None,
                 max_prompt_tokens: int | None = None, prompt_mode: str = "auto", system: str | None = None,
                 limits: Limits | None = None, trees: TreePlan | None = None,
                 verify_ms: dict[int, float] | None = None, info: str = "", offered: list[str] | None = None,
                 loader: Callable[[str], Bundle] | None = None, max_loaded: int = 2):
        self.tok, self.baseline, self.eagle = tokenizer, baseline, eagle
        self.compare = dict(compare or {})
        # the tree a request gets unless it sets one: per sampling regime (greedy / sampled), shared by UI and /run
        self.trees = trees or TreePlan.fixed(DEFAULT_TREE, "engine default")
        self.mode = resolve_prompt_mode(tokenizer, prompt_mode)  # 'chat' (user turn) or 'raw'; shown in the UI
        self.system = system
        self.verify_ms = verify_ms
        self.text_every, self.plot_every, self.charts_every = text_every, plot_every, charts_every
        lim = limits or Limits()
        self.limits = dataclasses.replace(lim, max_new_tokens=max_new_tokens or lim.max_new_tokens,
                                          prompt_tokens=max_prompt_tokens or lim.prompt_tokens)
        self.queue = None  # the app's gradio Queue, set by build_demo: lets a request notice its client has gone
        target = baseline.target  # core.engine.events.Decoder: None for a fake without a model
        self.model = str(target.name or type(target).__name__) if target is not None else "unknown"
        self.dtype = target.dtype if target is not None else "float32"  # a divergence's near-tie tolerance
        self._labels: dict[int, str] = {}  # token id -> tree label; a pure tokenizer cache, not user data
        first = Bundle(self.model, tokenizer, baseline, eagle, self.compare, None, info)
        self.models = Models(first, loader, max_loaded)  # the loaded bundles every session shares
        self.offered = tuple(dict.fromkeys([self.model, *(offered or ())]))
        spaces = spaces_module()
        self.zero_gpu = spaces is not None
        self._race = self._race_steps  # GPU work; on ZeroGPU wrapped so a GPU is attached for its duration
        if spaces is not None:
            self._race = spaces.GPU(duration=self._gpu_seconds)(self._race)

    # ---------------------------------------------------------------------------------- the device work

    def _gpu_seconds(self, prompt_ids: list[int], cfg: DecodeConfig,
                     lanes: tuple[str, ...] = ("baseline", "eagle"), *_) -> int:
        """ZeroGPU's declared duration for one race (same arguments as _race_steps): it follows the request's
        tokens and lanes, capped by the time budget per request."""
        return gpu_seconds(cfg.max_new_tokens, len(lanes), self.limits.seconds)

    def _race_steps(self, prompt_ids: list[int], cfg: DecodeConfig, lanes: tuple[str, ...], decoders: dict,
                    should_stop: Callable[[], bool] | None = None, stops: tuple[str, ...] = (),
                    tokenizer=None) -> Iterator[tuple[str, StepEvent]]:
        """The lanes' decoders raced step by step until done or should_stop(); closing this generator stops all.
        `decoders`: by lane slot, bound when the request started (a model switch never changes a request's
        decoders). Each lane ends on its own once its text contains one of `stops` (core/engine/stops.py)."""
        closed = [False]

        def stop() -> bool:
            return closed[0] or bool(should_stop and should_stop())

        racers = [Lane(name, decoders[name]) for name in lanes]  # the request's tree for every lane (core/lanes.py)
        tok = tokenizer or self.tok
        text = lambda ids: tok.decode(ids, skip_special_tokens=True)  # noqa: E731
        gens = {lane.name: stop_at(lane.generate(prompt_ids, cfg, stop), text, stops) for lane in racers}
        try:
            yield from race(gens)
        finally:
            closed[0] = True
            for g in gens.values():
                g.close()  # runs the decoders' finally blocks: caches freed now, not at garbage collection

    def dtype_of(self, bundle: Bundle):
        """The dtype a bundle's target computes in (a divergence's near-tie tolerance): the start-up model's as read
        at start, another's from its target; fp32 for a fake without one."""
        target = bundle.baseline.target
        if bundle is self.models.first or target is None:
            return self.dtype
        return target.dtype

    @staticmethod
    def decoders(bundle: Bundle, compare: str) -> dict:
        """A bundle's decoders by lane slot, the token-level lane `compare` names in the "compare" slot."""
        return {"baseline": bundle.baseline, "eagle": bundle.eagle, "compare": bundle.compare.get(compare)}

    def _steps(self, record: RunRecord, cfg: DecodeConfig, gone: Callable[[], bool] = lambda: False,
               bundle: Bundle | None = None) -> Iterator[tuple[str, StepEvent]]:
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

        bundle = bundle or self.models.first
        bound = self.decoders(bundle, record.compare_kind)
        return noted(record, self._race(record.prompt_ids, cfg, record.lanes, bound,
                                        None if self.zero_gpu else should_stop, record.stops, bundle.tokenizer))

    def client_gone(self, request: gr.Request | None, api_name: str) -> Callable[[], bool]:
        """A check that turns true once the client of this queued request has disconnected or cancelled it.

        Gradio marks a running event `alive = False` when its client's stream closes, and drops it from the active
        jobs when it is cancelled; a plain (non-generator) function is never told either, so `/run` asks. This reads
        Gradio's queue (no public API for it); when the event cannot be found (a direct call, another Gradio) the
        check stays false and the request simply runs to its end or its time budget."""
        event = self._event_of(request, api_name)
        if event is None:
            return lambda: False
        return lambda: not getattr(event, "alive", True) or not any(ev is event for ev in self._active())

    def _active(self) -> list:
        """The events Gradio's queue is running now (its `active_jobs`; no public API)."""
        return [ev for job in list(getattr(self.queue, "active_jobs", None) or []) if job for ev in job]

    def _event_of(self, request: gr.Request | None, api_name: str):
        """This request's running queue event, or None (a direct call, another Gradio, or not found)."""
        session = getattr(request, "session_hash", None)
        if self.queue is None or session is None:
            return None
        mine = [ev for ev in self._active() if getattr(ev, "session_hash", None) == session
                and getattr(getattr(ev, "fn", None), "api_name", None) == api_name]
        return mine[0] if len(mine) == 1 else None

    def check_queue_wait(self, request: gr.Request | None, api_name: str) -> None:
        """The queue's deadline: a request that waited longer than limits.queue_wait for its turn (Gradio's event
        records when it joined) is answered "busy" instead of running, so a long queue of long requests cannot
        keep a client waiting for hours. Requests not found in the queue (direct calls) are not checked."""
        event = self._event_of(request, api_name)
        joined = getattr(event, "enqueue_time", None)
        waited = time.monotonic() - joined if isinstance(joined, (int, float)) else 0.0
        if waited > self.limits.queue_wait:
            msg = (f"The server was busy: this request waited {waited:.0f} s for its turn, longer than the "
                   f"{self.limits.queue_wait:g} s the queue allows. Please try again.")
            log_rejected(api_name, self.model, msg)
            raise user_error(msg, "Server busy")

    # ---------------------------------------------------------------------------------- input boundary

    def served(self, bundle: Bundle | None = None, choice: Choice | None = None) -> Served:
        """What a request is checked against: its bundle (the start-up model's by default), its prompt mode (the
        start-up model's as configured, another model's chosen by its tokenizer), context, lanes and trees."""
        bundle = bundle or self.models.first
        first = bundle is self.models.first
        target = bundle.baseline.target
        choice = choice or Choice(bundle.name)
        return Served(choice.model, bundle.tokenizer,
                      self.mode if first else resolve_prompt_mode(bundle.tokenizer, "auto"),
                      bundle.trees or self.trees, tuple(self.compare if first else bundle.compare),
                      target.max_positions if target is not None else None, self.system, choice.head or "")

    def prepare(self, settings: RunSettings, endpoint: str = "run", bundle: Bundle | None = None,
                choice: Choice | None = None) -> tuple[RunRecord, DecodeConfig]:
        """Validate one request's settings -> (fresh RunRecord, DecodeConfig) through app/inputs.py `prepare`, the
        one input check of the UI's event and `/run`; a refusal becomes a gr.Error with its one-line message (and
        one log line)."""
        served = self.served(bundle, choice)
        try:
            return prepare(settings, served, self.limits)
        except RequestError as e:
            log_rejected(endpoint, served.name, str(e))
            raise user_error(str(e), e.title) from None

    def session_bundle(self, choice: object, endpoint: str) -> tuple[Bundle, Choice, str]:
        """(bundle, choice, status) a session's request runs on: its choice (None: the start-up model) from the
        shared bundles, loaded again when it was dropped (status says so; "" when it was in memory). A model that
        cannot be loaded is a gr.Error for this request: never another model in its place."""
        choice = choice if isinstance(choice, Choice) else Choice(self.model)
        try:
            bundle, status = self.models.get(choice)
        except Exception as e:  # noqa: BLE001 - a loader's failure (missing weights, a head gone) is this request's
            msg = f"{choice.name} could not be loaded: {type(e).__name__}: {e}"
            log_rejected(endpoint, choice.name, msg)
            raise user_error(msg, "Model not loaded") from None
        return bundle, choice, status

    def named(self, model: object) -> Choice:
        """`/run`'s `model=`: one of the offered presets (None: the start-up model), else a gr.Error listing them."""
        if model is None or model == "":
            return Choice(self.model)
        if not isinstance(model, str) or model not in self.offered:
            msg = f"model must be one of {', '.join(self.offered)}; got {short(model)}"
            log_rejected("run", self.model, msg)
            raise user_error(msg, "Model not offered")
        return Choice(model)

    def bundle_of(self, record: RunRecord) -> Bundle:
        """The bundle a record ran on, while it is in memory (labels and text of a stopped or reopened run); else
        loaded again."""
        return self.models.peek(record.choice) or self.models.get(record.choice)[0]

    def label_for(self, record: RunRecord) -> Callable[[int], str]:
        """Tree labels in the tokenizer of the model a record ran on (the start-up model's are cached)."""
        bundle = self.models.peek(record.choice) if record is not None else None
        if bundle is None or bundle is self.models.first:
            return self.label
        tok = bundle.tokenizer
        return lambda t: token_label(tok.decode([t], skip_special_tokens=False))

    def planned_tree(self, temperature, touched: bool, choice: Choice | None = None):
        """UI: the temperature moved; the tree sliders follow the plan for its regime (the session's model's) until
        the user moves them."""
        try:
            t = as_float("temperature", temperature)
        except ValueError:
            t = None
        if touched or t is None:
            return [gr.skip()] * len(RunSettings.TREE_FIELDS)
        bundle = self.models.peek(choice if isinstance(choice, Choice) else None)
        plan = bundle.trees if bundle is not None and bundle.trees is not None else self.trees
        tree = self.limits.clamp(plan.for_temperature(t))
        return [tree.total_tokens, tree.depth, tree.top_k, tree.lookup, tree.stop_below]

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
            if outcome == "ok" and record.note.startswith("Stopped after the"):  # the time budget's note (_steps)
                outcome = "timeout"
            if outcome == "ok" and record.stop:
                outcome = "stopped"
            if outcome == "ok" and not all(record.finished(lane) for lane in record.lanes):
                outcome = "stopped"
            log_request(endpoint, record, time.perf_counter() - t0, outcome, error)

    # ---------------------------------------------------------------------------------- UI events

    def stream(self, prompt, max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k,
               lookup=DEFAULT_TREE.lookup, compare="none", stop_below=DEFAULT_TREE.stop_below, messages=None,
               stop="", choice: Choice | None = None, request: gr.Request = None):
        """Run button (the UI's inputs in RunSettings order, then the session's model choice): stream the lanes as
        a race. Text refreshes at most every text_every s, the draft trees every plot_every s and the charts every
        charts_every s (plotly re-renders are what costs the browser most). `messages`: the conversation so far in
        chat mode (app/chat.py), None for a single prompt; `stop`: stop strings, one per line; `choice`: the
        session's model and head (app/state.py Choice; None: the start-up model)."""
        self.check_queue_wait(request, "stream")
        bundle, choice, status = self.session_bundle(choice, "stream")
        if status:
            gr.Info(f"{choice.name}: {status}")
        settings = RunSettings(prompt, max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k, lookup,
                               compare, stop_below, messages, stop)
        record, cfg = self.prepare(settings, "stream", bundle, choice)
        gone = self.client_gone(request, "stream")
        det = {s: Detokenizer(bundle.tokenizer, record.prompt_ids) for s in record.lanes}
        steps = self._steps(record, cfg, gone, bundle)  # binds the session's decoders now
        yield self._view(record, det, bundle, running=True, tree=True, charts=True)
        with self.guarded("stream", record):
            yield from self._streamed(record, det, steps, bundle)
        for d in det.values():
            d.flush()
        if record.note:
            gr.Warning(record.note)
        yield self._view(record, det, bundle, running=False, tree=True, charts=True, final=True)

    def _streamed(self, record: RunRecord, det: dict[str, Detokenizer], steps: Iterator[tuple[str, StepEvent]],
                  bundle: Bundle) -> Iterator[tuple]:
        """The race's steps into the record, with a view whenever text, trees or charts are due."""
        last = dict.fromkeys(("text", "tree", "charts"), time.monotonic())
        every = {"text": self.text_every, "tree": self.plot_every, "charts": self.charts_every}
        try:
            for side, ev in steps:
                record.add(side, ev)
                det[side].add(ev.new_token_ids)
                now = time.monotonic()
                due = {k: now - last[k] >= every[k] for k in last}
                if any(due.values()):
                    last.update({k: now for k, d in due.items() if d})
                    yield self._view(record, det, bundle, running=True, tree=due["tree"], charts=due["charts"])
        finally:
            steps.close()  # cancel / tab closed: both decoders' finally blocks free their caches now

    def finish(self, record: RunRecord | None):
        """Stop button: ask the running request to stop after its current step, and show what it produced.
        (After a run the state holds only its compact record, with no events: then there is nothing to stop.)"""
        if not record or not record.live:
            return ordered({})
        record.stop = True
        record.events = {lane: list(steps) for lane, steps in record.events.items()}  # snapshot
        bundle = self.bundle_of(record)
        det = {s: Detokenizer(bundle.tokenizer, record.prompt_ids) for s in record.lanes}
        for s in record.lanes:
            det[s].add(record.ids(s))
            det[s].flush()
        return self._view(record, det, bundle, running=False, tree=True, charts=True, final=True)

    def show_step(self, record: RunRecord | None, step):
        """Step slider: the draft trees of verify step `step` (1-based) of the last request, EAGLE-2's and, in the
        three-lane view, the token-level lane's (its own step `step`, or its last when it needed fewer)."""
        return self._step_tree(record, step, "eagle"), (
            self._step_tree(record, step, "compare") if record and record.compare_kind != "none" else gr.skip())

    def _step_tree(self, record: RunRecord | None, step, lane: str):
        n = record.lane_tree_count(lane) if record else 0
        if not n:
            return tree_figure(None, self.label)
        i = min(max(int(step or 1), 1), n)
        ev = record.tree_step(i - 1, lane)
        where = f"{self._lane_name(record, lane)} step" if record.compare_kind != "none" else "Step"
        return tree_figure(ev, self.label_for(record), title=f"{where} {i} of {n}: {len(ev.tree) - 1} drafted, "
                                                 f"{ev.accepted_drafts} accepted + 1 target token")

    @staticmethod
    def _lane_name(record: RunRecord, lane: str) -> str:
        """A lane slot's title in this request (app/lanes.py)."""
        return next(row.title for row in record.rows if row.slot == lane)

    @staticmethod
    def _tree_title(steps: list[StepEvent], running: bool, name: str = "") -> str:
        if not steps:
            return ""
        last = steps[-1]
        where = f"Step {len(steps)} (live)" if running else f"Step {len(steps)} of {len(steps)}"
        where = f"{name} {where.lower()}" if name else where
        return f"{where}: {len(last.tree) - 1} drafted, {last.accepted_drafts} accepted + 1 target token"

    def encode(self, prompt: str) -> list[int]:
        """Prompt text -> ids: raw text for base models, one user turn of the chat template for chat models."""
        return encode_prompt(self.tok, prompt, self.mode, self.system)

    def label(self, token_id: int) -> str:
        if token_id not in self._labels:
            self._labels[token_id] = token_label(self.tok.decode([token_id], skip_special_tokens=False))
        return self._labels[token_id]

    def _view(self, record: RunRecord, det: dict[str, Detokenizer], bundle: Bundle, running: bool, tree: bool,
              charts: bool, final: bool = False) -> tuple:
        """All outputs for the current record, keyed by component id, returned in OUTPUTS order."""
        stats = lane_stats(record)
        done = {s: record.finished(s) for s in record.lanes}
        meta = {s: panel_meta(stats[s], running and not done[s], done[s]) for s in record.lanes}
        view = {"baseline-output": baseline_html(record.prompt, det["baseline"].text, meta["baseline"])}
        for row in record.rows[1:]:  # the drafting lanes: every token coloured by its draft depth
            events = record.steps(row.slot)
            view[f"{row.slot}-output"] = eagle_html(
                record.prompt, det[row.slot].pieces, det[row.slot].ids, token_depths(events), token_steps(events),
                meta[row.slot], legend_depth=record.tree_depth, lookup=token_lookup(events))
        dtype = self.dtype_of(bundle)
        badge = identical_badge(record.ids("baseline"), record.ids("eagle"), record.greedy,
                                complete=done["baseline"] and done["eagle"],
                                divergence=self._divergence(record, dtype), dtype=short_name(dtype),
                                bit_exact=stats["baseline"].bit_exact and stats["eagle"].bit_exact)
        label = lane_title(record.compare_kind)
        view["stats"] = stats_html(stats["baseline"], stats["eagle"], badge, stats.get("compare"), label)
        if charts:
            view["stats-charts"] = stats_figure(stats["baseline"], stats["eagle"], stats.get("compare"), label)
        if tree:
            view |= self._trees(record, running)
        if final:
            view["step-slider"] = step_slider(max(record.lane_tree_count(row.slot) for row in record.rows[1:]))
        elif running and not record.live:
            view["step-slider"] = step_slider(0)
        if final:  # the run's full record and views for the history, the "why" panel and the downloads
            texts = {s: d.text for s, d in det.items()}
            record.finished_run = finished_run(record, texts, view, dtype, self.verify_ms)
        # while running, the state holds the live record (Stop flips its flag); afterwards only its compact form
        view["state"] = record.compact() if final else record
        return ordered(view)

    def _trees(self, record: RunRecord, running: bool) -> dict:
        """One draft-tree figure per drafting lane, keyed by component id."""
        three = record.compare_kind != "none"
        view = {}
        for row in record.rows[1:]:
            steps = record.lane_tree_steps(row.slot)
            key = "compare-tree" if row.slot == "compare" else "draft-tree"
            view[key] = tree_figure(steps[-1] if steps else None, self.label_for(record),
                                    title=self._tree_title(steps, running, row.title if three else ""))
        return view

    @staticmethod
    def _divergence(record: RunRecord, dtype):
        """Where greedy outputs part ways and whether a near tie explains it, from the recorded margins."""
        return divergence_of(record.steps("baseline"), record.steps("eagle"), dtype) if record.greedy else None

    # ---------------------------------------------------------------------------------- API

    def run(self, prompt: str, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
            seed: int = 0, total_tokens: int | None = None, depth: int | None = None,
            top_k: int | None = None, lookup: int | None = None, compare: str = "none",
            stop_below: float | None = None, messages: list | None = None, stop: list[str] | None = None,
            model: str | None = None, request: gr.Request = None) -> dict:
        """Generate `prompt` with plain decoding and EAGLE-2 (and, with `compare` "medusa" or "lookup", a
        token-level drafter as a third lane); return the texts, whether the token ids are identical, each method's
        statistics and the speedup (EAGLE-2 tokens/s over baseline tokens/s). Tree settings left out take the tree
        the UI would show for this temperature (planned per regime by `--tree auto`); `tree` in the result says
        which tree ran, and every drafting lane uses it. At T = 0, `divergence` says where outputs that differ part
        ways (index, both top-2 margins, near_tie, tolerance, label, dtype; core/engine/exactness.py), else None. `note`
        says why a run stopped early (the time budget per request), else it is empty. A third lane adds
        `compare_method`, `compare_text`, `compare_token_ids`, `compare_identical`, `compare` (statistics),
        `compare_speedup` (over baseline) and `eagle_vs_compare` (EAGLE-2 tokens/s over the token-level lane's).
        `messages` (a list of {role, content}: system first if any, then user and assistant turns) makes this a turn
        of a conversation: the prompt, when not empty, is appended as the new user turn (else the history's last
        message must be one), all of it goes through the chat template, and the result's `messages` is the history
        with the target's own answer (the baseline lane's text) appended: send it back with the next prompt.
        `stop`: stop strings; each lane ends once its text contains one. Each lane's statistics carry vLLM's metric
        names beside this project's (core/engine/metrics_names.py). `model`: one of the offered presets (left out:
        the server's default model); `model` in the result names what ran, `model_status` says when it had to be
        loaded. `why`: per drafting lane the "why this speedup" numbers (plain step, draft and verify ms at the tree
        it ran, predicted beside measured speedup, and `what_if`: the smaller trees priced on this machine)."""
        self.check_queue_wait(request, "run")
        bundle, choice, status = self.session_bundle(self.named(model), "run")
        settings = RunSettings(prompt, max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k, lookup,
                               compare, stop_below, messages, stop)
        record, cfg = self.prepare(settings, "run", bundle, choice)
        with self.guarded("run", record):
            steps = self._steps(record, cfg, self.client_gone(request, "run"), bundle)
            try:
                for side, ev in steps:
                    record.add(side, ev)
            finally:
                steps.close()
        return self._answer(record, bundle) | {"model_status": status}

    def _answer(self, record: RunRecord, bundle: Bundle) -> dict:
        """`/run`'s result for a finished record: app/result.py's one record of a run under /run's keys, plus the
        kernel routes it ran with and, for a conversation turn, the history with this turn's answer."""
        texts = {s: bundle.tokenizer.decode(record.ids(s), skip_special_tokens=True) for s in record.lanes}
        out = api_result(run_result(record, texts, self.dtype_of(bundle), self.verify_ms), record.compare_kind)
        # the dtype and kernel routes this ran with, pinned or timed (core/models/choices.py); None for a fake target
        target = bundle.baseline.target
        drafter = getattr(bundle.eagle, "drafter", None)
        out["choices"] = choices.describe(target, drafter) if target is not None else None
        if record.messages is not None:
            out["messages"] = answered(record.messages, out["baseline_text"])
        return out
