"""Model and head picker: switch the served model among the offered presets, or try a head folder of your own.

Offered presets (`offered`): the offline presets whose packages are installed (core/models/presets.py); hub presets only
when EAGLE_PRESETS names them, since a hub preset downloads on first use and this app never reaches for the network
on its own. On a Space, EAGLE_PRESETS=a,b sets the offered set (and its order; the first is the default).

Switching loads a model once (its bundle is kept; at most `keep` loaded, the least recently used dropped), says how
long it took, and swaps the served decoders under a lock. Requests in flight keep the decoders they started with
(their generators hold them) and finish there; the switch never waits for the device queue. The served model is
the server's, not one visitor's: a switch changes it for every later request (a Space sets EAGLE_PRESETS to what
its hardware can hold).

A head folder (typed path, or uploaded as a .zip or as the folder's files) is read as `python -m core.interop
check` reads it (core.drafters.heads.vllm_problems: config, weight names, what a serving engine would refuse; reported,
not refused), then bound to the served target: a head whose hidden size or vocabulary does not fit the model is
refused with core's one-line message and the served head stays.
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

ENV = "EAGLE_PRESETS"
UPLOADS = Path(tempfile.gettempdir()) / "eagle-playground-heads"


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


class Picker:
    """The served model of one app: `current`, the offered preset names, loaded bundles, and the swap."""

    def __init__(self, pg, current: Bundle, names: list[str], loader: Callable[[str], Bundle] = load_preset,
                 keep: int = 2):
        self.pg, self.loader, self.keep = pg, loader, keep
        self.names = list(dict.fromkeys([*names]))
        self.current, self.first = current, current.name
        self.loaded: OrderedDict[str, Bundle] = OrderedDict({current.name: current})
        self.lock = threading.Lock()  # one load or swap at a time; requests are never made to wait on it

    def choices(self) -> tuple[str, ...]:
        """What the model menu lists: the model served at start, then the offered presets."""
        return tuple(dict.fromkeys([self.first, *self.names]))

    def label_for(self, model: str) -> Callable[[int], str]:
        """Tree labels in the tokenizer of `model` (a past run's), while it is loaded; else the served one's."""
        from app.render import token_label

        bundle = self.loaded.get(model)
        if bundle is None or bundle is self.current:
            return self.pg.label
        tok = bundle.tokenizer
        return lambda t: token_label(tok.decode([t], skip_special_tokens=False))

    def _serve(self, bundle: Bundle) -> None:
        """Point the Playground at `bundle` (requests already running keep their own decoders)."""
        from core.prompt import prompt_mode

        pg = self.pg
        pg.tok, pg.baseline, pg.eagle = bundle.tokenizer, bundle.baseline, bundle.eagle
        pg.compare = dict(bundle.compare)
        if bundle.trees is not None:
            pg.trees = bundle.trees
        pg.mode = prompt_mode(bundle.tokenizer, "auto")
        target = bundle.baseline.target
        pg.model = bundle.name
        pg.dtype = target.dtype if target is not None else "float32"
        pg._labels = {}  # token labels belong to a tokenizer
        self.current = bundle

    def switch(self, name: str) -> str:
        """Serve preset `name` (loading it once); returns the message to show. ValueError when it is not offered."""
        if name not in self.names and name not in self.loaded:
            raise ValueError(f"{name!r} is not offered here (offered: {', '.join(self.names)})")
        with self.lock:
            t0 = time.perf_counter()
            bundle = self.loaded.get(name)
            cached = bundle is not None
            if bundle is None:
                bundle = self.loader(name)
                self.loaded[name] = bundle
            self.loaded.move_to_end(name)
            while len(self.loaded) > self.keep:
                self.loaded.popitem(last=False)
            self._serve(bundle)
            took = time.perf_counter() - t0
        return (f"Serving **{name}**: " + ("already loaded, switched" if cached else f"loaded in {took:.1f} s")
                + ". Requests already running finish on the model they started with.")

    def try_head(self, path: str | None = None, files: list[str] | None = None) -> str:
        """Serve the current model with a head folder; returns the message. ValueError when it does not fit."""
        folder = head_folder(path, files)
        report = interop_report(folder)  # raises ValueError for a folder that is not a head at all
        with self.lock:
            t0 = time.perf_counter()
            base = self.loaded.get(self.current.name.split(" + ")[0], self.current)
            try:
                bundle = bind_head(base, folder)
            except ValueError as e:
                raise ValueError(f"this head does not fit {base.name}: {e}") from None
            self._serve(bundle)
            took = time.perf_counter() - t0
        return f"Serving **{bundle.name}** (head read and bound in {took:.1f} s; {report})."


def make_picker(pg, info: str, presets: list[str] | None, loader: Callable[[str], Bundle] | None) -> Picker | None:
    """The Picker of a freshly built Playground (serving what it was built with); None when nothing is offered."""
    names = offered() if presets is None else list(presets)
    if not names:
        return None
    target = pg.baseline.target
    if loader is None:
        device = str(target.device) if target is not None else None

        def loader(name: str) -> Bundle:
            return load_preset(name, device)

    current = Bundle(pg.model, pg.tok, pg.baseline, pg.eagle, dict(pg.compare), pg.trees, info)
    return Picker(pg, current, names, loader)


def build_picker(picker: Picker) -> dict:
    """The "Model and head" panel (where ui.py calls this); returns its components by id."""
    import gradio as gr

    with gr.Accordion("Model and head", open=False, elem_id="picker"):
        with gr.Row():
            model = gr.Dropdown(choices=list(picker.choices()),
                                value=picker.current.name, label="Model (preset, with its shipped head)",
                                elem_id="model-choice", scale=2)
            head_path = gr.Textbox(label="Head folder on this machine", placeholder="static/heads/...",
                                   elem_id="head-path", scale=2)
            upload = gr.File(label="…or upload a head (.zip, or the folder's files)", file_count="multiple",
                             elem_id="head-upload", scale=2)
            use_head = gr.Button("Use this head", elem_id="use-head", scale=1)
        status = gr.Markdown("", elem_id="picker-status")
    return {"model-choice": model, "head-path": head_path, "head-upload": upload, "use-head": use_head,
            "picker-status": status}


def wire_picker(picker: Picker, comps: dict, info, race_with, lane_choices: Callable[[dict], list]) -> None:
    """Switch on a model choice, bind a head on its button; `info`: the model line above the race, updated;
    `race_with`: the third-lane radio, whose choices follow the served model's token-level lanes."""
    import gradio as gr

    def after(message: str):
        return (f"✅ {message}", gr.Markdown(picker.current.info or f"Target **{picker.current.name}**"),
                gr.Radio(choices=lane_choices(picker.pg.compare), value="none"))

    def switch(name):
        if not name or name == picker.current.name:
            return gr.skip(), gr.skip(), gr.skip()
        try:
            return after(picker.switch(name))
        except ValueError as e:
            return f"⚠️ {e}", gr.skip(), gr.skip()

    def head(path, files):
        try:
            return after(picker.try_head(path, files))
        except ValueError as e:
            return f"⚠️ Head refused: {e}", gr.skip(), gr.skip()

    outs = [comps["picker-status"], info, race_with]
    comps["model-choice"].change(switch, [comps["model-choice"]], outs, api_visibility="private",
                                 concurrency_id="picker", concurrency_limit=1)
    comps["use-head"].click(head, [comps["head-path"], comps["head-upload"]], outs, api_visibility="private",
                            concurrency_id="picker", concurrency_limit=1)
