"""Layout of the EAGLE Playground and the one place its listeners are wired. build_demo() never launches.

Models come in as arguments (loaded once by app.py, or fakes in tests); per-user data lives in gr.State. CSS and
theme go to launch() in Gradio 6, so they are returned by launch_options() and passed in exactly one place.
"""
from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from app.chat import chat_controls
from app.chat import wire as wire_chat
from app.handlers import OUTPUTS, Playground
from app.inputs import COMPARE, MAX_NEW_TOKENS, MAX_PROMPT_TOKENS, Limits, RunSettings
from app.lanes import lane_title
from app.panels import build_panels, restore_from_link, wire_panels
from app.picker import Picker, build_picker, offered, preset_loader, wire_picker
from app.plots import stats_figure, tree_figure
from app.state import STATE_TTL_S, drop_record
from core.engine.autotree import TreePlan
from core.engine.config import TreeConfig

STATIC = Path(__file__).resolve().parent.parent / "static"
SANS = ("system-ui", "-apple-system", "Segoe UI", "Roboto", "Helvetica Neue", "Arial", "sans-serif")  # offline
MONO = ("ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "DejaVu Sans Mono", "monospace")
PLACEHOLDER = '<div class="gen-text placeholder">Press Run to generate.</div>'
# The page takes no file, but Gradio's upload route exists on every app: cap what it accepts and sweep its cache, so
# an app exposed with --host 0.0.0.0 or --share cannot be filled with uploads.
MAX_UPLOAD = "1mb"
DELETE_CACHE = (3600, 3600)  # every hour, delete Gradio's temporary files older than an hour


def load_examples(mode: str = "chat") -> list[str]:
    """Example prompts from static/examples.json for the prompt mode: questions a person would ask an assistant
    (general, coding, maths, writing) for a chat model, completion-style openings for a base model ('raw')."""
    path = STATIC / "examples.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return list(data.get(mode, [])) if isinstance(data, dict) else list(data)


def launch_options() -> dict:
    """Arguments for demo.launch(): theme and CSS. The CSS is read and inlined by Gradio, and the page uses no other
    file of static/, so no folder is served besides Gradio's own: static/ holds head weights and third-party
    pages (static/heads/*/GEMMA_TERMS.html, a saved web page with scripts) that must not be served from the app's
    origin. A future image for the page would be served as that one file (allowed_paths=[its path])."""
    return dict(
        theme=gr.themes.Default(primary_hue="indigo", secondary_hue="sky", neutral_hue="slate", font=SANS,
                                font_mono=MONO),
        css_paths=[STATIC / "style.css"],
        allowed_paths=[],
        max_file_size=MAX_UPLOAD,
    )


def serve(demo: gr.Blocks, host: str | None, port: int | None, share: bool) -> str:
    """Launch without blocking and return the URL to show; a share tunnel that cannot start (offline, blocked) must
    not take the local app down, so it falls back to serving locally."""
    opts = dict(server_name=host, server_port=port, prevent_thread_lock=True, **launch_options())
    try:
        _, local_url, share_url = demo.launch(share=share, **opts)
    except Exception as e:  # noqa: BLE001 - whatever the tunnel raised
        print(f"[eagle-playground] could not create a public link ({e}); serving locally only", flush=True)
        demo.close()
        _, local_url, share_url = demo.launch(share=False, **opts)
    if share and not share_url:
        print("[eagle-playground] --share: no public link (offline or tunnel blocked); serving locally only",
              flush=True)
    return share_url or local_url


def build_demo(tokenizer, baseline, eagle, *, info: str = "", examples: list[str] | None = None,
               text_every: float = 0.1, plot_every: float = 0.5, max_new_tokens: int = MAX_NEW_TOKENS,
               max_prompt_tokens: int = MAX_PROMPT_TOKENS, tree: TreePlan | TreeConfig | None = None,
               prompt_mode: str = "auto", system: str | None = None, limits: Limits | None = None,
               compare: dict | None = None, verify_ms: dict[int, float] | None = None,
               presets: list[str] | None = None, loader=None, max_loaded_models: int = 2) -> gr.Blocks:
    """Blocks wired to the given tokenizer and decoders; `info` is one markdown line (model, head, device).
    prompt_mode 'auto' wraps prompts in the chat template when the tokenizer has one ('chat'), else 'raw'.
    `limits` bounds every request (sliders and validation alike); max_new_tokens / max_prompt_tokens override it.
    `tree`: a TreePlan (app.py --tree auto plans one tree for greedy and one for sampled runs), one TreeConfig for
    both, or None for the engine default. The tree sliders show the plan for the temperature chosen until the user
    moves one of them; /run fills left-out tree settings the same way. `compare`: token-level decoders by COMPARE
    key ("medusa", "lookup"; app/startup.py compare_decoders) offered as a third lane; two lanes stay the default.
    `verify_ms`: verify cost by tree size on this machine (core.engine.autotree.verify_profile), for the "why" what-if.
    `presets`: the model picker's offer (None: app/picker.py `offered()`, the installed presets or EAGLE_PRESETS;
    [] hides the picker); `loader`: preset name -> picker Bundle (default: load the preset on this device);
    `max_loaded_models`: the most models in memory at once, shared by every session (app/picker.py `Models`).

    The layout is built top to bottom by the build_* helpers below, then the wire_* helpers connect the listeners
    (in this order: the race, the chat, the tree controls, the picker, the panels and the link, the /run API)."""
    trees = TreePlan.fixed(tree, "given") if isinstance(tree, TreeConfig) else tree  # None: Playground's default
    names = offered() if presets is None else list(presets)
    loader = loader or preset_loader(str(baseline.target.device) if baseline.target is not None else None)
    pg = Playground(tokenizer, baseline, eagle, text_every=text_every, plot_every=plot_every,
                    charts_every=max(2.0, 4 * plot_every), max_new_tokens=max_new_tokens,
                    max_prompt_tokens=max_prompt_tokens, prompt_mode=prompt_mode, system=system, limits=limits,
                    trees=trees, compare=compare, verify_ms=verify_ms, info=info, offered=names,
                    loader=loader if names else None, max_loaded=max_loaded_models)
    picker = Picker(pg.models, names) if names else None  # a session's model and head (app/picker.py)
    examples = load_examples(pg.mode) if examples is None else examples

    with gr.Blocks(title="EAGLE Playground", delete_cache=DELETE_CACHE) as demo:
        info_md, picker_ui = build_header(pg, info, eagle.note, picker)
        chat = chat_controls(pg.mode == "chat")  # app/chat.py: the conversation (chat models only)
        ui = build_prompt_row(pg, examples) | build_settings(pg.limits, pg.trees.greedy) | build_lanes(pg)
        panels = build_panels()  # "why this speedup", the session's runs, the link (app/panels.py)
        build_intro()
        ui["state"] = gr.State(None, time_to_live=STATE_TTL_S, delete_callback=drop_record)
        choice = gr.State(None, time_to_live=STATE_TTL_S)  # this session's model and head (None: the start-up one)
        # set once the user moves a tree slider: from then on their tree is kept, not the planned one
        tree_touched = gr.State(False, time_to_live=STATE_TTL_S)
        # RunSettings order
        inputs = [ui[k] for k in ("prompt", "max_new", "temperature", "top_p", "seed", "total_tokens", "depth",
                                  "top_k", "lookup", "race_with", "stop_below")] + [chat.history, ui["stop_strings"]]
        by_id = {k: ui[k] for k in OUTPUTS}  # the run's output components by id
        run_event, stop_event = wire_race(pg, ui, inputs + [choice], by_id)
        wire_chat(chat, lambda record: pg.bundle_of(record).tokenizer, run_event, stop_event, ui["state"],
                  ui["prompt"])
        wire_tree_controls(pg, ui, choice, tree_touched)
        link_targets = dict(zip(RunSettings.__dataclass_fields__, inputs))
        if picker_ui is not None:
            link_targets |= wire_model_choice(picker, picker_ui, choice, info_md, ui["race_with"])
        wire_panels(pg, panels, by_id, link_targets, [run_event, stop_event], pg.label_for)
        restore, restored = restore_from_link(pg, link_targets, picker.choices() if picker else (), tree_touched)
        demo.load(restore, None, restored, queue=False, api_visibility="private")
        wire_api(pg)
    # a full queue answers "Queue is full" (HTTP 503; gradio_client raises QueueError) instead of growing forever
    demo.queue(default_concurrency_limit=1, max_size=pg.limits.queue)
    pg.queue = getattr(demo, "_queue", None)  # lets a running request notice that its client has gone
    return demo


def build_header(pg: Playground, info: str, note: str, picker: Picker | None) -> tuple[gr.Markdown, dict | None]:
    """The title, the model line (`info`), the model and head picker, the prompt mode and the head's note.
    Returns the model line (the picker updates it) and the picker's components (None without a picker)."""
    gr.Markdown("# EAGLE Playground\nThe same prompt decoded twice on the same device: plain decoding and "
                "**EAGLE-2** speculative decoding, raced by compute time.", elem_id="header")
    info_md = gr.Markdown(info, elem_id="model-info", visible=bool(info) or picker is not None)
    picker_ui = build_picker(picker) if picker is not None else None  # app/picker.py
    mode_text = ("**chat**: your text is sent as one user turn of the model's chat template"
                 + (" after the system prompt" if pg.system else "") if pg.mode == "chat"
                 else "**raw text**: the model continues your text as is (base model, no chat template)")
    gr.Markdown(f"Prompt mode: {mode_text}", elem_id="prompt-mode")
    if note:
        gr.Markdown(f"⚠️ {note}", elem_id="head-note")
    return info_md, picker_ui


def build_prompt_row(pg: Playground, examples: list[str]) -> dict:
    """The prompt box, Run and Stop, the third-lane radio and the example prompts; components by name."""
    with gr.Row(equal_height=True):
        prompt = gr.Textbox(label="Prompt (completion style: the model continues your text)" if pg.mode == "raw"
                            else "Prompt (a user message to the chat model)", lines=3,
                            max_lines=12, scale=5, elem_id="prompt",
                            placeholder="Once upon a time" if pg.mode == "raw" else "Ask a question",
                            max_length=pg.limits.prompt_chars)
        with gr.Column(scale=1, min_width=150):
            run = gr.Button("Run ▶", variant="primary", elem_id="run")
            stop = gr.Button("Stop ■", variant="stop", elem_id="stop")
    lanes = ["none"] + [k for k in COMPARE if k in pg.compare]
    race_with = gr.Radio([(COMPARE[k], k) for k in lanes], value="none", label="Race against",
                         info="add a token-level drafter as a third lane: same tree budget, same verification",
                         elem_id="compare-choice", visible=len(lanes) > 1)
    if examples:
        gr.Examples(examples=[[e] for e in examples], inputs=[prompt], label="Example prompts",
                    examples_per_page=12)
    return {"prompt": prompt, "run": run, "stop": stop, "race_with": race_with}


def build_settings(lim: Limits, tree_defaults: TreeConfig) -> dict:
    """The Settings accordion: length, sampling, the tree (starting at `tree_defaults`, the greedy plan: the
    temperature slider starts at 0) and stop strings, each bounded by `lim`; components by name."""
    with gr.Accordion("Settings", open=False, elem_id="settings"):
        with gr.Row():
            max_new = gr.Slider(1, lim.max_new_tokens, value=min(128, lim.max_new_tokens), step=1,
                                label="Max new tokens", elem_id="max-new-tokens")
            temperature = gr.Slider(0.0, lim.temperature, value=0.0, step=0.05, label="Temperature",
                                    info="0 = greedy: both outputs must be token-identical",
                                    elem_id="temperature")
            top_p = gr.Slider(lim.top_p_min, 1.0, value=1.0, step=0.05, label="Top-p", elem_id="top-p")
            seed = gr.Number(value=0, precision=0, minimum=0, label="Seed", elem_id="seed")
        with gr.Row():
            total_tokens = gr.Slider(1, lim.total_tokens, value=min(tree_defaults.total_tokens, lim.total_tokens),
                                     step=1,
                                     label="Tree: total tokens", info="nodes verified per step, root included",
                                     elem_id="tree-total")
            depth = gr.Slider(1, lim.depth, value=min(tree_defaults.depth, lim.depth), step=1, label="Tree: depth",
                              info="draft levels below the root", elem_id="tree-depth")
            top_k = gr.Slider(1, lim.top_k, value=min(tree_defaults.top_k, lim.top_k), step=1, label="Tree: top-k",
                              info="children per expanded node", elem_id="tree-top-k")
            lookup = gr.Slider(0, lim.lookup, value=min(tree_defaults.lookup, lim.lookup), step=1,
                               label="Context lookup",
                               info="tokens copied from earlier text into the tree; doubles while copies "
                                    "are taken whole, up to 4x (0 = head only)",
                               elem_id="tree-lookup")
            stop_below = gr.Slider(0.0, lim.stop_below, value=min(tree_defaults.stop_below, lim.stop_below),
                                   step=0.05, label="Tree: stop below",
                                   info="dynamic depth: no draft level below one whose best guess has a "
                                        "cumulative draft probability under this (0 = fixed depth)",
                                   elem_id="tree-stop-below")
        with gr.Row():
            stop_strings = gr.Textbox(label="Stop strings", lines=1, max_lines=4, max_length=4 * 65,
                                      placeholder="one per line, e.g. ###", elem_id="stop-strings",
                                      info="each lane ends once its text contains one (kept in the output)")
    return {"max_new": max_new, "temperature": temperature, "top_p": top_p, "seed": seed,
            "total_tokens": total_tokens, "depth": depth, "top_k": top_k, "lookup": lookup,
            "stop_below": stop_below, "stop_strings": stop_strings}


def build_lanes(pg: Playground) -> dict:
    """The race: the output panels (baseline, the hidden third lane, EAGLE-2), the statistics and their charts,
    the draft trees and the step slider. Returns the components by name, the run's outputs under their ids."""
    ui = {}
    with gr.Row():
        with gr.Column(elem_classes=["panel"]):
            gr.Markdown("### Baseline · plain decoding", elem_classes=["panel-title"])
            ui["baseline-output"] = gr.HTML(PLACEHOLDER, elem_id="baseline-output", elem_classes=["gen-panel"],
                                            js_on_load=None)
        with gr.Column(elem_classes=["panel"], visible=False) as ui["compare_col"]:
            ui["compare_title"] = gr.Markdown("### Token-level drafter", elem_classes=["panel-title"])
            ui["compare-output"] = gr.HTML(PLACEHOLDER, elem_id="compare-output", elem_classes=["gen-panel"],
                                           js_on_load=None)
        with gr.Column(elem_classes=["panel"]):
            gr.Markdown("### EAGLE-2 · speculative decoding (feature-level)", elem_classes=["panel-title"])
            ui["eagle-output"] = gr.HTML(PLACEHOLDER, elem_id="eagle-output", elem_classes=["gen-panel"],
                                         js_on_load=None)
    with gr.Row():
        with gr.Column(scale=4, min_width=380):
            ui["stats"] = gr.HTML('<div class="stats-empty">Statistics appear here.</div>', elem_id="stats",
                                  js_on_load=None)
        with gr.Column(scale=5):
            ui["stats-charts"] = gr.Plot(stats_figure(None, None), show_label=False, elem_id="stats-charts")
    with gr.Row():
        with gr.Column(visible=False, min_width=300) as ui["compare_tree_col"]:
            ui["compare-tree"] = gr.Plot(tree_figure(None, pg.label), show_label=False, elem_id="compare-tree")
        with gr.Column(min_width=300):
            ui["draft-tree"] = gr.Plot(tree_figure(None, pg.label), show_label=False, elem_id="draft-tree")
    ui["step-slider"] = gr.Slider(0, 1, value=0, step=1, interactive=False, elem_id="step-slider",
                                  label="Draft tree of verify step (scrub after the run)")
    return ui


def build_intro() -> None:
    """The "How it works" accordion: static/intro.md, closed."""
    with gr.Accordion("How it works", open=False, elem_id="how-it-works"):
        gr.Markdown((STATIC / "intro.md").read_text(encoding="utf-8"), latex_delimiters=[])


def wire_race(pg: Playground, ui: dict, inputs: list, by_id: dict) -> tuple:
    """Run, Stop and the third-lane radio. `inputs`: the RunSettings components and the session's choice;
    `by_id`: the run's output components by id. Returns (run event, stop event), which the chat and the panels
    follow."""
    outputs = [by_id[k] for k in OUTPUTS]  # the handlers return their views in this order
    # preprocess=False: the raw values reach Playground.prepare, the one validation path this event shares
    # with /run (same maxima, same messages; Gradio's own slider checks would answer some bad values with a
    # generic "the app has raised an exception")
    run_event = ui["run"].click(pg.stream, inputs, outputs, api_name="stream", api_visibility="undocumented",
                                concurrency_limit=1, concurrency_id="device", show_progress="minimal",
                                show_progress_on=[by_id["baseline-output"], by_id["eagle-output"]],
                                preprocess=False)

    def show_lanes(choice):
        three = choice in pg.compare
        title = f"### {lane_title(choice) or choice} · speculative decoding (token-level)" if three else ""
        return gr.Column(visible=three), gr.Column(visible=three), gr.Markdown(title)

    ui["race_with"].change(show_lanes, [ui["race_with"]], [ui["compare_col"], ui["compare_tree_col"],
                                                            ui["compare_title"]],
                           queue=False, api_visibility="private")
    stop_event = ui["stop"].click(pg.finish, [ui["state"]], outputs, cancels=[run_event], queue=False,
                                  api_visibility="private")
    return run_event, stop_event


def wire_tree_controls(pg: Playground, ui: dict, choice: gr.State, tree_touched: gr.State) -> None:
    """The step slider redraws a stored tree; moving a tree slider marks the tree as the user's; the temperature
    slider shows the planned tree for its regime until then."""
    # queue=False: scrubbing redraws a stored tree (no device work), so it never takes a place in the queue
    ui["step-slider"].input(pg.show_step, [ui["state"], ui["step-slider"]], [ui["draft-tree"], ui["compare-tree"]],
                            trigger_mode="always_last", show_progress="hidden", api_visibility="private",
                            queue=False)
    tree_sliders = [ui[k] for k in ("total_tokens", "depth", "top_k", "lookup", "stop_below")]  # TREE_FIELDS order
    for slider in tree_sliders:  # .input fires on the user's own moves only, not on the updates below
        slider.input(lambda: True, None, tree_touched, queue=False, api_visibility="private")
    ui["temperature"].input(pg.planned_tree, [ui["temperature"], tree_touched, choice], tree_sliders, queue=False,
                            show_progress="hidden", api_visibility="private")


def wire_model_choice(picker: Picker, picker_ui: dict, choice: gr.State, info_md: gr.Markdown,
                      race_with: gr.Radio) -> dict:
    """The model and head picker (app/picker.py `wire_picker`), whose model also changes the third lanes on
    offer. Returns the picker's components a link sets, by LINK_FIELDS key."""
    wire_picker(picker, picker_ui, choice, info_md, race_with,
                lambda lanes: [(COMPARE[k], k) for k in COMPARE if k == "none" or k in lanes])
    return {"model": picker_ui["model-choice"], "head": picker_ui["head-path"]}


def wire_api(pg: Playground) -> None:
    """`/run`: the same race as the UI, one request, one JSON answer (app/handlers.py `Playground.run`)."""
    gr.api(pg.run, api_name="run", concurrency_limit=1, concurrency_id="device",
           api_description="Generate the prompt with plain decoding and EAGLE-2 (compare='medusa' or 'lookup' "
                           "adds a token-level drafter as a third lane; model= one of the offered presets); "
                           "returns the texts, token-identity, per-method statistics, the speedups and the "
                           "'why this speedup' numbers.")
