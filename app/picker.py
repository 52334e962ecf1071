"""Model and head picker: each visitor chooses their own model among the offered presets, or a head folder of their
own; the loaded models are shared by every session and bounded.

Offered presets (`offered`): the offline presets whose packages are installed (core/models/presets.py); hub presets only
when EAGLE_PRESETS names them, since a hub preset downloads on first use and this app never reaches for the network
on its own. On a Space, EAGLE_PRESETS=a,b sets the offered set (and its order).

A visitor's choice (app/state.py `Choice`: model and head) lives in that visitor's gr.State; every request of the
session runs on it and no other session sees it. The bundles behind the choices are shared (`Models`): the start-up
model always stays, and at most `keep` bundles are in memory in all, the least recently used dropped. A request
whose bundle was dropped reloads it and says so (never another model in its place); a request in flight keeps the
decoders it started with (its generator holds them).

A head folder (typed path, or uploaded as a .zip or as the folder's files) is read as `python -m core.interop
check` reads it (core.drafters.heads.vllm_problems: config, weight names, what a serving engine would refuse; reported,
not refused), then bound to the session's model: a head whose hidden size or vocabulary does not fit the model is
refused with core's one-line message and the session keeps its head.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from app.state import Choice

ENV = "EAGLE_PRESETS"
UPLOADS = Path(tempfile.gettempdir()) / "eagle-playground-heads"
DROPPED_KEPT = 64  # dropped choices remembered, so a reload can say it is one


@dataclass(frozen=True)
class Bundle:
    """What one served model is: its tokenizer, decoders and tree plan, and the line shown above the race."""

    name: str
    tokenizer: object
    baseline: object
    eagle: object
    compare: dict = field(default_factory=dict)
    trees: object = None  # core.engine.autotree.TreePlan; None keeps the Playground's
    info: str = ""


def offered(env: str | None = None, presets=None) -> list[str]:
    """Preset names the picker offers: EAGLE_PRESETS (comma-separated, known and installed ones, in that order), else
    every installed offline preset."""
    from core.models.presets import PRESETS

    presets = PRESETS if presets is None else presets
    by_name = {p.name: p for p in presets}
    raw = os.environ.get(ENV, "") if env is None else env
    wanted = [n.strip().lower() for n in raw.split(",") if n.strip()]
    if wanted:
        return [n for n in wanted if n in by_name and by_name[n].installed()]
    return [p.name for p in presets if p.offline and p.installed()]


def load_preset(name: str, device: str | None = None, dtype: str | None = None) -> Bundle:
    """A preset's target, shipped head and token-level lanes, warmed up, with the preset's recommended tree."""
    from app.startup import compare_decoders, info_line, warm_up
    from core.engine.autotree import TreePlan
    from core.pipeline import build_decoders
    from core.models.presets import get_preset

    target, tok, baseline, eagle = build_decoders(name, None, device, dtype)
    lanes = compare_decoders(target)
    warm_up(tok, baseline, eagle, *lanes.values())
    preset = get_preset(name)
    trees = TreePlan.fixed(preset.tree, f"preset {name}") if preset else None
    return Bundle(name, tok, baseline, eagle, lanes, trees, info_line(target, eagle))


def head_folder(path: str | None = None, files: list[str] | None = None) -> Path:
    """The head folder to read: a typed path, or uploaded files copied into a fresh folder (a .zip is unpacked,
    refusing members that would land outside it). ValueError with one line when there is none."""
    if files:
        out = UPLOADS / f"{time.time_ns():x}"
        out.mkdir(parents=True)
        for f in files:
            f = Path(f)
            if f.suffix == ".zip":
                with zipfile.ZipFile(f) as z:
                    for m in z.infolist():
                        dest = (out / m.filename).resolve()
                        if not dest.is_relative_to(out.resolve()):
                            raise ValueError(f"{f.name}: member {m.filename!r} would land outside the head folder")
                    z.extractall(out)
            else:
                shutil.copy(f, out / f.name)
        found = sorted(p.parent for p in out.rglob("config.json"))
        if not found:
            raise ValueError("the upload holds no config.json: upload the head folder's files or a .zip of it")
        return found[0]
    if path and path.strip():
        p = Path(path.strip()).expanduser()
        if not p.is_dir():
            raise ValueError(f"{p} is not a folder")
        return p
    raise ValueError("choose a head folder (its path) or upload one")


def interop_report(folder: Path) -> str:
    """What `python -m core.interop check` says of the folder, in one line."""
    from core.drafters.heads import vllm_problems

    problems = vllm_problems(folder)
    return "vLLM reads it unedited" if not problems else f"vLLM: {len(problems)} problem(s): " + "; ".join(problems[:3])


def bind_head(bundle: Bundle, folder: Path) -> Bundle:
    """The bundle with its EAGLE-2 lane drafting with the head in `folder`; ValueError when it does not fit."""
    from core.pipeline import decoder_for

    target = bundle.baseline.target
    eagle = decoder_for(folder, target)  # ValueError: hidden size / vocabulary mismatch
    return replace(bundle, name=f"{bundle.name} + {folder.name}", eagle=eagle,
                   info=bundle.info.split(" · head:")[0] + f" · head: `{folder.name}` (uploaded or chosen)")


class Models:
    """The loaded bundles every session shares: `first` (the start-up model) always, and others loaded on demand by
    `loader` (preset name -> Bundle), at most `keep` bundles in memory in all, the least recently used dropped."""

    def __init__(self, first: Bundle, loader: Callable[[str], Bundle] | None = None, keep: int = 2):
        if keep < 1:
            raise ValueError(f"at least one model must stay loaded, got {keep}")
        self.first, self.loader, self.keep = first, loader, keep
        self.loaded: OrderedDict[Choice, Bundle] = OrderedDict()
        self.dropped: OrderedDict[Choice, None] = OrderedDict()  # recently dropped (the "reloaded" wording)
        self.lock = threading.RLock()  # one load at a time; a bundle in memory is handed out without waiting

    def peek(self, choice: Choice | None) -> Bundle | None:
        """The bundle of `choice` when it is in memory (the start-up model for None), else None; loads nothing."""
        if choice is None or choice == Choice(self.first.name):
            return self.first
        return self.loaded.get(choice)

    def get(self, choice: Choice | None) -> tuple[Bundle, str]:
        """(bundle, status) for `choice`: status is "" when it was in memory, else what was loaded and how long it
        took ("reloaded" when it had been dropped). ValueError when it cannot be loaded here."""
        bundle = self.peek(choice)
        if bundle is not None:
            with self.lock:
                if choice in self.loaded:
                    self.loaded.move_to_end(choice)
            return bundle, ""
        with self.lock:
            t0, again = time.perf_counter(), choice in self.dropped
            bundle = self.peek(choice) or self._load(choice)
            took = time.perf_counter() - t0
        what = "reloaded (it had been dropped to keep memory bounded)" if again else "loaded"
        return bundle, f"{what} in {took:.1f} s"

    def _load(self, choice: Choice) -> Bundle:
        """Load the bundle of `choice` (the model through the loader, then the head bound to it) and keep it."""
        base = self.peek(Choice(choice.model))
        if base is None:
            if self.loader is None:
                raise ValueError(f"{choice.model!r} cannot be loaded here (served: {self.first.name})")
            base = self._keep(Choice(choice.model), self.loader(choice.model))
        if not choice.head:
            return base
        try:
            bundle = bind_head(base, Path(choice.head))
        except ValueError as e:
            raise ValueError(f"this head does not fit {choice.model}: {e}") from None
        return self._keep(choice, bundle)

    def _keep(self, choice: Choice, bundle: Bundle) -> Bundle:
        """Remember a loaded bundle, dropping the least recently used beyond `keep` (the start-up model counts)."""
        self.loaded[choice] = bundle
        self.loaded.move_to_end(choice)
        self.dropped.pop(choice, None)
        while self.loaded and len(self.loaded) + 1 > self.keep:
            gone, _ = self.loaded.popitem(last=False)
            self.dropped[gone] = None
        while len(self.dropped) > DROPPED_KEPT:
            self.dropped.popitem(last=False)
        return bundle

    def names(self) -> list[str]:
        """The bundles in memory, the start-up model first, then least recently used first."""
        return [self.first.name] + [c.name for c in self.loaded]


class Picker:
    """The model menu of one app: the offered preset names, and a session's choice made from them (or a head
    folder bound to its model), loaded through the shared `Models`."""

    def __init__(self, models: Models, names: list[str]):
        self.models = models
        self.names = list(dict.fromkeys(names))
        self.first = models.first.name

    def choices(self) -> tuple[str, ...]:
        """What the model menu lists: the model served at start, then the offered presets."""
        return tuple(dict.fromkeys([self.first, *self.names]))

    def switch(self, name: str) -> tuple[Choice, str]:
        """The session's new choice (preset `name` with its own head, loaded once) and the message to show;
        ValueError when it is not offered."""
        if name not in self.choices():
            raise ValueError(f"{name!r} is not offered here (offered: {', '.join(self.choices())})")
        choice = Choice(name)
        bundle, status = self.models.get(choice)
        return choice, (f"Serving **{bundle.name}** to this session: {status or 'already loaded'}. Other visitors "
                        "keep their own model; a run already going finishes on the model it started with.")

    def try_head(self, current: Choice | None, path: str | None = None,
                 files: list[str] | None = None) -> tuple[Choice, str]:
        """The session's model with a head folder bound (this session only) and the message; ValueError when the
        folder is no head or does not fit the model."""
        folder = head_folder(path, files)
        report = interop_report(folder)  # raises ValueError for a folder that is not a head at all
        model = (current or Choice(self.first)).model
        t0 = time.perf_counter()
        choice = Choice(model, str(folder))
        bundle, _ = self.models.get(choice)
        took = time.perf_counter() - t0
        return choice, f"Serving **{bundle.name}** to this session (head read and bound in {took:.1f} s; {report})."


def preset_loader(device: str | None) -> Callable[[str], Bundle]:
    """The default loader: a preset's bundle on `device` (the start-up model's)."""

    def loader(name: str) -> Bundle:
        return load_preset(name, device)

    return loader


def build_picker(picker: Picker) -> dict:
    """The "Model and head" panel (where ui.py calls this); returns its components by id."""
    import gradio as gr

    with gr.Accordion("Model and head", open=False, elem_id="picker"):
        with gr.Row():
            model = gr.Dropdown(choices=list(picker.choices()),
                                value=picker.first, label="Model (preset, with its shipped head; this session only)",
                                elem_id="model-choice", scale=2)
            head_path = gr.Textbox(label="Head folder on this machine", placeholder="static/heads/...",
                                   elem_id="head-path", scale=2)
            upload = gr.File(label="…or upload a head (.zip, or the folder's files)", file_count="multiple",
                             elem_id="head-upload", scale=2)
            use_head = gr.Button("Use this head", elem_id="use-head", scale=1)
        status = gr.Markdown("", elem_id="picker-status")
    return {"model-choice": model, "head-path": head_path, "head-upload": upload, "use-head": use_head,
            "picker-status": status}


def wire_picker(picker: Picker, comps: dict, choice: object, info, race_with,
                lane_choices: Callable[[dict], list]) -> None:
    """Choose a model on the menu, bind a head on its button: each changes only this session's choice (`choice`,
    its gr.State). `info`: the model line above the race, updated; `race_with`: the third-lane radio, whose choices
    follow the session's model's token-level lanes."""
    import gradio as gr

    skip = (gr.skip(),) * 5

    def after(new: Choice, message: str):
        bundle = picker.models.peek(new) or picker.models.first
        return (new, f"✅ {message}", gr.Markdown(bundle.info or f"Target **{bundle.name}**"),
                gr.Radio(choices=lane_choices(bundle.compare), value="none"), new.head or "")

    def switch(name, current):
        if not name or name == (current or Choice(picker.first)).name:
            return skip
        try:
            return after(*picker.switch(name))
        except ValueError as e:
            return gr.skip(), f"⚠️ {e}", gr.skip(), gr.skip(), gr.skip()

    def head(path, files, current):
        try:
            return after(*picker.try_head(current, path, files))
        except ValueError as e:
            return gr.skip(), f"⚠️ Head refused: {e}", gr.skip(), gr.skip(), gr.skip()

    outs = [choice, comps["picker-status"], info, race_with, comps["head-path"]]  # the head box: what links keep
    comps["model-choice"].change(switch, [comps["model-choice"], choice], outs, api_visibility="private",
                                 concurrency_id="picker", concurrency_limit=1)
    comps["use-head"].click(head, [comps["head-path"], comps["head-upload"], choice], outs,
                            api_visibility="private", concurrency_id="picker", concurrency_limit=1)
