"""Event functions of the playground: one validated RunSettings -> the lanes raced on one device -> rendered outputs.

No layout here (ui.py), no input coercion (inputs.py), no race or ZeroGPU plumbing (race.py), no start-up work
(startup.py), and no per-user state held on the object: `Playground` only binds the loaded models, which every
session shares read-only; each request's events live in a RunRecord passed through gr.State. Outputs are built as
a dict keyed by component id (`OUTPUTS` is the one order ui.py wires them in).
(No `from __future__ import annotations` here: gr.api reads the /run signature's real types.)
"""
import dataclasses
import time
from contextlib import contextmanager
from types import MappingProxyType
from typing import Callable, Iterator

import gradio as gr

from app.inputs import (  # noqa: F401  (re-exported: the app's public names stay importable from here)
    COMPARE, DEFAULT_TREE, MAX_NEW_TOKENS, MAX_PROMPT_TOKENS, Limits, RunSettings, as_float, as_int, compare_choice,
    make_config, short, user_error, within,
)
from app.plots import stats_figure, tree_figure
from app.race import gpu_seconds, is_oom, log_rejected, log_request, race, spaces_module  # noqa: F401
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
from app.history import finished_run, run_settings
from app.startup import auto_or_parse, warm_up  # noqa: F401
from app.state import RunRecord
from core.engine.autotree import TreePlan
from core.engine.config import DecodeConfig, DecodeError
from core.conversation import answered, check_messages, encode_messages, with_system
from core.engine.events import StepEvent, summarize
from core.models import choices
from core.engine.eagle import NON_FINITE_DRAFT_NOTE
from core.engine.exactness import Divergence, divergence_of, short_name
from core.lanes import Lane
from core.engine.metrics_names import with_serving_names
from core.engine.stops import check_stops, stop_at
from core.prompt import PromptError, encode_prompt, prompt_limit
from core.prompt import prompt_mode as resolve_prompt_mode

OUTPUTS = ("baseline-output", "eagle-output", "stats", "stats-charts", "draft-tree", "step-slider",
           "compare-output", "compare-tree", "state")  # the two-lane outputs first, the third lane's after, state last
LANE_TITLES = MappingProxyType({"medusa": "Medusa", "lookup": "Prompt lookup"})


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
    request may race as a third lane, by COMPARE key ("medusa", "lookup"; app/startup.py compare_decoders)."""

    def __init__(self, tokenizer, baseline, eagle, *, compare: dict | None = None, text_every: float = 0.1, plot_every: float = 0.5,
                 charts_every: float = 2.0, max_new_tokens: int | None = None,
                 max_prompt_tokens: int | None = None, prompt_mode: str = "auto", system: str | None = None,
                 limits: Limits | None = None, trees: TreePlan | None = None):
        self.tok, self.baseline, self.eagle = tokenizer, baseline, eagle
        self.compare = dict(compare or {})
        # the tree a request gets unless it sets one: per sampling regime (greedy / sampled), shared by UI and /run
        self.trees = trees or TreePlan.fixed(DEFAULT_TREE, "engine default")
        self.mode = resolve_prompt_mode(tokenizer, prompt_mode)  # 'chat' (user turn) or 'raw'; shown in the UI
        self.system = system
        self.text_every, self.plot_every, self.charts_every = text_every, plot_every, charts_every
        lim = limits or Limits()
        self.limits = dataclasses.replace(lim, max_new_tokens=max_new_tokens or lim.max_new_tokens,
                                          prompt_tokens=max_prompt_tokens or lim.prompt_tokens)
        self.cap, self.prompt_cap = self.limits.max_new_tokens, self.limits.prompt_tokens
        self.queue = None  # the app's gradio Queue, set by build_demo: lets a request notice its client has gone
        target = baseline.target  # core.engine.events.Decoder: None for a fake without a model
        self.model = str(target.name or type(target).__name__) if target is not None else "unknown"
        self.dtype = target.dtype if target is not None else "float32"  # a divergence's near-tie tolerance
        self._labels: dict[int, str] = {}  # token id -> tree label; a pure tokenizer cache, not user data
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

    def _race_steps(self, prompt_ids: list[int], cfg: DecodeConfig, lanes: tuple[str, ...] = ("baseline", "eagle"),
                    compare: str = "none", should_stop: Callable[[], bool] | None = None,
                    decoders: dict | None = None, stops: tuple[str, ...] = ()) -> Iterator[tuple[str, StepEvent]]:
        """The lanes' decoders raced step by step until done or should_stop(); closing this generator stops all.
        `decoders`: by lane, bound when the request started (a model switch never changes a request's decoders).
        Each lane ends on its own once its text contains one of `stops` (core/engine/stops.py)."""
        closed = [False]

        def stop() -> bool:
            return closed[0] or bool(should_stop and should_stop())

        decoders = decoders or {"baseline": self.baseline, "compare": self.compare.get(compare), "eagle": self.eagle}
        racers = [Lane(name, decoders[name]) for name in lanes]  # the request's tree for every lane (core/lanes.py)
        text = lambda ids: self.tok.decode(ids, skip_special_tokens=True)  # noqa: E731
        gens = {lane.name: stop_at(lane.generate(prompt_ids, cfg, stop), text, stops) for lane in racers}
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

        bound = {"baseline": self.baseline, "compare": self.compare.get(record.compare_kind), "eagle": self.eagle}
        return noted(record, self._race(record.prompt_ids, cfg, record.lanes, record.compare_kind,
                                        None if self.zero_gpu else should_stop, bound, record.stops))

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

    def prepare(self, settings: RunSettings, endpoint: str = "run") -> tuple[RunRecord, DecodeConfig]:
        """Validate one request's settings -> (fresh RunRecord, DecodeConfig), the one input check of the UI's event
        and `/run`; raises gr.Error with a clear one-line message (and logs one line) for anything outside
        self.limits."""
        try:
            return self._prepare(settings)
        except gr.Error as e:
            log_rejected(endpoint, self.model, str(e))
            raise

    def _prepare(self, settings: RunSettings) -> tuple[RunRecord, DecodeConfig]:
        prompt = settings.prompt
        if not isinstance(prompt, str):
            raise user_error(f"The prompt must be text, got {type(prompt).__name__}.", "Invalid prompt")
        if len(prompt) > self.limits.prompt_chars:  # before strip() or the tokenizer touch a huge prompt
            raise user_error(f"The prompt is {len(prompt)} characters; at most {self.limits.prompt_chars} are "
                             "accepted.", "Prompt too long")
        st = settings
        convo = None
        if st.messages is not None:  # a conversation turn: the history, then this prompt as the new user turn
            msgs = st.messages
            if isinstance(msgs, (list, tuple)) and prompt.strip():
                msgs = [*msgs, {"role": "user", "content": prompt}]
            try:
                convo = check_messages(msgs)
            except ValueError as e:
                raise user_error(f"Invalid conversation: {e}", "Invalid messages") from None
            if self.mode != "chat":
                raise user_error("A conversation needs a chat model; this one takes raw text (no chat template).",
                                 "Invalid messages")
            chars = sum(len(m["content"]) for m in convo)
            if chars > self.limits.prompt_chars:
                raise user_error(f"The conversation is {chars} characters; at most {self.limits.prompt_chars} are "
                                 "accepted. Reset it to start again.", "Conversation too long")
            prompt = convo[-1]["content"]
        if not prompt.strip():
            raise user_error("Enter a prompt first.", "Empty prompt")
        try:
            tree = self.tree_settings(st.temperature, *(getattr(st, f) for f in RunSettings.TREE_FIELDS))
            cfg = make_config(st.max_new_tokens, st.temperature, st.top_p, st.seed, *tree, cap=self.cap,
                              limits=self.limits)
            compare = compare_choice(st.compare, tuple(self.compare))
            stops = check_stops(st.stop.split("\n") if isinstance(st.stop, str) else st.stop)
        except ValueError as e:
            raise user_error(str(e), "Invalid setting") from None
        try:
            ids = self.encode(prompt) if convo is None else encode_messages(self.tok, with_system(convo, self.system))
        except PromptError as e:  # e.g. "prompt encodes to no tokens"
            raise user_error(f"The {e}.", "Empty prompt") from None
        except Exception as e:  # noqa: BLE001 - a tokenizer that refuses odd text (e.g. lone surrogates)
            raise user_error(f"The prompt cannot be tokenized: {type(e).__name__}", "Invalid prompt") from None
        if not ids:
            raise user_error("The prompt encodes to no tokens.", "Empty prompt")
        max_pos = self.baseline.target.max_positions if self.baseline.target is not None else None
        limit = prompt_limit(max_pos, cfg, self.prompt_cap)  # the one fit rule (core/prompt.py)
        if len(ids) > limit:
            raise user_error(f"The prompt is {len(ids)} tokens; at most {max(limit, 0)} fit with these settings.",
                             "Prompt too long")
        record = RunRecord(prompt=prompt, prompt_ids=ids, greedy=cfg.sampling.greedy, tree_depth=cfg.tree.depth,
                           model=self.model, compare_kind=compare, messages=convo,
                           settings=run_settings(prompt, cfg, compare), stops=stops)
        return record, cfg

    def tree_settings(self, temperature, total_tokens=None, depth=None, top_k=None, lookup=None,
                      stop_below=None) -> tuple:
        """Tree settings a request left out (None) filled from the tree planned for its temperature's regime."""
        planned = self.limits.clamp(self.trees.for_temperature(as_float("temperature", temperature)))
        given = (total_tokens, depth, top_k, lookup, stop_below)
        return tuple(getattr(planned, f) if v is None else v for f, v in zip(RunSettings.TREE_FIELDS, given))

    def planned_tree(self, temperature, touched: bool):
        """UI: the temperature moved; the tree sliders follow the plan for its regime until the user moves them."""
        try:
            t = as_float("temperature", temperature)
        except ValueError:
            t = None
        if touched or t is None:
            return [gr.skip()] * len(RunSettings.TREE_FIELDS)
        tree = self.limits.clamp(self.trees.for_temperature(t))
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
               stop="", request: gr.Request = None):
        """Run button (the UI's inputs in RunSettings order): stream the lanes as a race. Text refreshes at most
        every text_every s, the draft trees every plot_every s and the charts every charts_every s (plotly
        re-renders are what costs the browser most). `messages`: the conversation so far in chat mode (app/chat.py),
        None for a single prompt; `stop`: stop strings, one per line."""
        self.check_queue_wait(request, "stream")
        settings = RunSettings(prompt, max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k, lookup,
                               compare, stop_below, messages, stop)
        record, cfg = self.prepare(settings, endpoint="stream")
        gone = self.client_gone(request, "stream")
        det = {s: Detokenizer(self.tok, record.prompt_ids) for s in record.lanes}
        steps = self._steps(record, cfg, gone)  # binds the served decoders now, with the tokenizer that encoded it
        yield self._view(record, det, running=True, tree=True, charts=True)
        last = dict.fromkeys(("text", "tree", "charts"), time.monotonic())
        every = {"text": self.text_every, "tree": self.plot_every, "charts": self.charts_every}
        with self.guarded("stream", record):
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
        if not record or not (record.baseline or record.eagle or record.compare):
            return ordered({})
        record.stop = True
        for lane in record.lanes:  # snapshot
            setattr(record, lane, list(getattr(record, lane)))
        det = {s: Detokenizer(self.tok, record.prompt_ids) for s in record.lanes}
        for s in record.lanes:
            det[s].add(record.ids(s))
            det[s].flush()
        return self._view(record, det, running=False, tree=True, charts=True, final=True)

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
        return tree_figure(ev, self.label, title=f"{where} {i} of {n}: {len(ev.tree) - 1} drafted, "
                                                 f"{ev.accepted_drafts} accepted + 1 target token")

    @staticmethod
    def _lane_name(record: RunRecord, lane: str) -> str:
        return "EAGLE-2" if lane == "eagle" else LANE_TITLES.get(record.compare_kind, record.compare_kind)

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

    def _view(self, record: RunRecord, det: dict[str, Detokenizer], running: bool, tree: bool, charts: bool,
              final: bool = False) -> tuple:
        """All outputs for the current record, keyed by component id, returned in OUTPUTS order."""
        lanes = record.lanes
        stats = {s: summarize(getattr(record, s)) for s in lanes}
        done = {s: record.finished(s) for s in lanes}
        meta = {s: panel_meta(stats[s], running and not done[s], done[s]) for s in lanes}
        view = {"baseline-output": baseline_html(record.prompt, det["baseline"].text, meta["baseline"])}
        for lane in lanes[1:]:  # the drafting lanes: every token coloured by its draft depth
            events = getattr(record, lane)
            view[f"{lane}-output"] = eagle_html(record.prompt, det[lane].pieces, det[lane].ids, token_depths(events),
                                                token_steps(events), meta[lane], legend_depth=record.tree_depth,
                                                lookup=token_lookup(events))
        badge = identical_badge(record.ids("baseline"), record.ids("eagle"), record.greedy,
                                complete=done["baseline"] and done["eagle"], divergence=self._divergence(record),
                                dtype=short_name(self.dtype))
        three = "compare" in lanes
        label = LANE_TITLES.get(record.compare_kind, "")
        view["stats"] = stats_html(stats["baseline"], stats["eagle"], badge, stats.get("compare"), label)
        if charts:
            view["stats-charts"] = stats_figure(stats["baseline"], stats["eagle"], stats.get("compare"), label)
        if tree:
            for lane in lanes[1:]:  # one tree per drafting lane
                key = "compare-tree" if lane == "compare" else "draft-tree"
                steps = record.lane_tree_steps(lane)
                name = self._lane_name(record, lane) if three else ""
                view[key] = tree_figure(steps[-1] if steps else None, self.label,
                                        title=self._tree_title(steps, running, name))
        if final:
            view["step-slider"] = step_slider(max(record.lane_tree_count(lane) for lane in lanes[1:]))
        elif running and not any(getattr(record, lane) for lane in lanes):
            view["step-slider"] = step_slider(0)
        if final:  # the run's full record and views for the history, the "why" panel and the downloads
            record.finished_run = finished_run(record, det, stats, view, getattr(self, "verify_ms", None))
        # while running, the state holds the live record (Stop flips its flag); afterwards only its compact form
        view["state"] = record.compact() if final else record
        return ordered(view)

    def _divergence(self, record: RunRecord) -> Divergence | None:
        """Where greedy outputs part ways and whether a near tie explains it, from the recorded margins."""
        return divergence_of(record.baseline, record.eagle, self.dtype) if record.greedy else None

    # ---------------------------------------------------------------------------------- API

    def run(self, prompt: str, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
            seed: int = 0, total_tokens: int | None = None, depth: int | None = None,
            top_k: int | None = None, lookup: int | None = None, compare: str = "none",
            stop_below: float | None = None, messages: list | None = None, stop: list[str] | None = None,
            request: gr.Request = None) -> dict:
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
        names beside this project's (core/engine/metrics_names.py)."""
        self.check_queue_wait(request, "run")
        settings = RunSettings(prompt, max_new_tokens, temperature, top_p, seed, total_tokens, depth, top_k, lookup,
                               compare, stop_below, messages, stop)
        record, cfg = self.prepare(settings, endpoint="run")
        with self.guarded("run", record):
            steps = self._steps(record, cfg, self.client_gone(request, "run"))
            try:
                for side, ev in steps:
                    getattr(record, side).append(ev)
            finally:
                steps.close()
        stats = {s: summarize(getattr(record, s)) for s in record.lanes}
        b, e = stats["baseline"].tokens_per_s, stats["eagle"].tokens_per_s
        div = self._divergence(record)
        out = {
            "lanes": list(record.methods),
            "baseline_text": self.tok.decode(record.ids("baseline"), skip_special_tokens=True),
            "eagle_text": self.tok.decode(record.ids("eagle"), skip_special_tokens=True),
            "identical": record.ids("baseline") == record.ids("eagle"),
            # first differing token, both runs' top-2 margins there, near_tie (core/engine/exactness.py); None if none
            "divergence": div.as_dict() | {"dtype": short_name(self.dtype)} if div else None,
            "greedy": record.greedy,
            "baseline_token_ids": record.ids("baseline"),
            "eagle_token_ids": record.ids("eagle"),
            "baseline": with_serving_names(stats["baseline"].as_dict()),
            "eagle": with_serving_names(stats["eagle"].as_dict()),
            "speedup": e / b if b else 0.0,
            "tree": dataclasses.asdict(cfg.tree),
            "note": record.note,
            # the dtype and kernel routes this ran with, pinned or timed (core/models/choices.py); None for a fake target
            "choices": choices.describe(self.baseline.target, getattr(self.eagle, "drafter", None))
            if self.baseline.target is not None else None,
        }
        if record.messages is not None:
            out["messages"] = answered(record.messages, out["baseline_text"])
        if "compare" in stats:
            c = stats["compare"].tokens_per_s
            out |= {"compare_method": record.compare_kind,
                    "compare_text": self.tok.decode(record.ids("compare"), skip_special_tokens=True),
                    "compare_token_ids": record.ids("compare"),
                    "compare_identical": record.ids("baseline") == record.ids("compare"),
                    "compare": with_serving_names(stats["compare"].as_dict()),
                    "compare_speedup": c / b if b else 0.0,
                    "eagle_vs_compare": e / c if c else 0.0}
        return out
