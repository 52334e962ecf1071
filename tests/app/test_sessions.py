"""A visitor's choice is theirs (app/picker.py, app/handlers.py): two sessions on different presets, or one with a
head of its own, interleaved on one server, each getting its own model's output; the shared bundles bounded and
reloaded with a status; /run naming the model; history and links recording model and head."""
from __future__ import annotations

import types
import zipfile

import gradio as gr
import pytest
import torch

from app.handlers import Playground
from app.history import rows
from app.inputs import Limits
from app.links import from_query
from app.picker import Bundle, Picker
from app.state import Choice
from app.ui import build_demo
from core.drafters.draft_head import HeadConfig, init_head, save_head
from core.engine.config import DecodeConfig, TreeConfig
from core.pipeline import decoder_for
from fakes import tiny_stack

PROMPT = "Once upon a time"
SEEDS = {"tiny-a": 1, "tiny-b": 2}
ARGS = (16, 0.0, 1.0, 0, 8, 3, 2, 0)  # max_new, temperature, top_p, seed, total_tokens, depth, top_k, lookup


def loader(loads: list):
    def load(name: str) -> Bundle:
        loads.append(name)
        tok, b, e = tiny_stack(seed=SEEDS[name])
        return Bundle(name, tok, b, e, {}, None, f"Target **{name}** (fake preset)")

    return load


def playground(keep: int = 3, loads: list | None = None) -> Playground:
    tok, b, e = tiny_stack()
    return Playground(tok, b, e, text_every=0, plot_every=0, charts_every=0, offered=list(SEEDS),
                      loader=loader([] if loads is None else loads), max_loaded=keep)


def sequential(seed: int, n: int = 16) -> list[int]:
    """The model's own plain greedy run of PROMPT, alone (T=0: EAGLE-2 must give the same ids)."""
    tok, baseline, _ = tiny_stack(seed=seed)
    events = baseline.generate(list(tok.encode(PROMPT)), DecodeConfig(max_new_tokens=n))
    return [t for ev in events for t in ev.new_token_ids]


def interleave(*streams) -> list:
    """Step the UI streams in turn until all end; the last output of each."""
    last = [None] * len(streams)
    live = list(range(len(streams)))
    while live:
        for i in list(live):
            try:
                last[i] = next(streams[i])
            except StopIteration:
                live.remove(i)
    return last


def wired(demo: gr.Blocks, name: str):
    """The event function named `name` that build_demo wired (the picker's `switch` and `head`)."""
    return next(f.fn for f in demo.fns.values() if f.name == name)


def test_two_sessions_on_different_presets_each_get_their_own_model():
    """Sessions A (tiny-a) and B (tiny-b) interleaved step by step: each output token-identical to its own model's
    sequential run; A's switch changes neither B's choice nor what a session without a choice runs."""
    loads = []
    tok, b, e = tiny_stack()
    demo = build_demo(tok, b, e, examples=[], presets=list(SEEDS), loader=loader(loads), max_loaded_models=3)
    switch = wired(demo, "switch")
    session_b = switch("tiny-b", None)[0]
    session_a = switch("tiny-a", None)[0]
    assert session_a == Choice("tiny-a") and session_b == Choice("tiny-b")  # B's state value is B's alone
    pg = wired(demo, "stream").__self__  # the demo's own Playground: its shared bundles served both switches
    assert pg.model == "tiny-llama" and loads == ["tiny-b", "tiny-a"]
    a, bb, none = interleave(pg.stream(PROMPT, *ARGS, choice=session_a), pg.stream(PROMPT, *ARGS, choice=session_b),
                             pg.stream(PROMPT, *ARGS))
    for last, seed, model in ((a, 1, "tiny-a"), (bb, 2, "tiny-b"), (none, 0, "tiny-llama")):
        summary = last[-1].finished_run["summary"]
        assert summary["model"] == model and summary["identical"]
        assert summary["lanes"]["baseline"]["token_ids"] == summary["lanes"]["eagle2"]["token_ids"] == sequential(
            seed)
    assert sequential(1) != sequential(2)  # the models differ, so the check has teeth
    assert switch("tiny-b", session_b)[0] == gr.skip()  # choosing what the session has changes nothing


def test_a_head_upload_binds_to_its_session_only(tmp_path):
    """Session A uploads a head for the start-up model; session B keeps the shipped head. Interleaved, A drafts
    with its head (every draft tree as the head's own sequential run) and B with the shipped one, both lossless."""
    tok, b, e = tiny_stack()
    demo = build_demo(tok, b, e, examples=[], presets=list(SEEDS), loader=loader([]))
    target = b.target
    save_head(init_head(HeadConfig.for_target(target.hidden_size, target.vocab_size), seed=7), tmp_path / "mine",
              dtype=torch.float32)
    upload = tmp_path / "mine.zip"
    with zipfile.ZipFile(upload, "w") as z:
        for p in (tmp_path / "mine").iterdir():
            z.write(p, f"mine/{p.name}")
    session_a, status, *_, box = wired(demo, "head")("", [str(upload)], None)
    assert "tiny-llama + mine" in status and session_a.head_name == "mine" and box == session_a.head
    pg = wired(demo, "stream").__self__
    first_a, first_b = next(pa := pg.stream(PROMPT, *ARGS, choice=session_a)), next(pb := pg.stream(PROMPT, *ARGS))
    interleave(pa, pb)
    live_a, live_b = first_a[-1], first_b[-1]
    cfg = DecodeConfig(max_new_tokens=16, tree=TreeConfig(8, 3, 2, 0))
    own = list(decoder_for(tmp_path / "mine", target).generate(live_a.prompt_ids, cfg))
    shipped = list(e.generate(live_b.prompt_ids, cfg))
    trees = lambda events: [[n.token_id for n in ev.tree] for ev in events]  # noqa: E731
    assert trees(live_a.steps("eagle")) == trees(own) and trees(live_b.steps("eagle")) == trees(shipped)
    assert trees(own) != trees(shipped)  # the heads draft differently, so the check has teeth
    assert live_a.ids("eagle") == live_a.ids("baseline") == live_b.ids("eagle")
    assert live_a.head == session_a.head and live_b.head == ""
    summary = live_a.finished_run
    assert summary["summary"]["head"] == "mine" and rows([types.SimpleNamespace(finished_run=summary)])[0][2] == (
        "tiny-llama + mine")


def test_shared_bundles_are_bounded_and_a_dropped_model_reloads_with_a_status():
    loads = []
    pg = playground(keep=2, loads=loads)  # the start-up model and one other
    first = pg.run(PROMPT, 8, model="tiny-a")
    assert first["model"] == "tiny-a" and first["model_status"].startswith("loaded in")
    assert pg.run(PROMPT, 8, model="tiny-a")["model_status"] == ""  # in memory
    assert pg.run(PROMPT, 8, model="tiny-b")["model_status"].startswith("loaded in")
    assert len(pg.models.loaded) + 1 <= 2 and pg.models.names() == ["tiny-llama", "tiny-b"]
    again = pg.run(PROMPT, 8, model="tiny-a")  # dropped for tiny-b: loaded again, never another model instead
    assert again["model_status"].startswith("reloaded") and again["model"] == "tiny-a"
    assert again["baseline_token_ids"] == first["baseline_token_ids"] and loads == ["tiny-a", "tiny-b", "tiny-a"]
    assert pg.run(PROMPT, 8)["model"] == "tiny-llama"  # the start-up model always stays
    pg.run(PROMPT, 8, model="tiny-b")  # drops tiny-a again; the UI's stream reloads it for its session
    record = list(pg.stream(PROMPT, *ARGS, choice=Choice("tiny-a")))[-1][-1]
    assert record.model == "tiny-a" and record.finished_run["summary"]["lanes"]["baseline"]["token_ids"] == sequential(
        1) and loads[-1] == "tiny-a" and pg.models.names() == ["tiny-llama", "tiny-a"]


def test_run_names_the_model_and_refuses_one_not_offered():
    pg = playground()
    for name, seed in (("tiny-llama", 0), ("tiny-a", 1), ("tiny-b", 2)):
        out = pg.run(PROMPT, 16, model=name)
        assert out["model"] == name and out["baseline_token_ids"] == out["eagle_token_ids"] == sequential(seed)
        why = out["why"][0]
        assert why["lane"] == "EAGLE-2" and why["plain_step_ms"] > 0 and why["verify_ms"] > 0
        assert {"draft_ms", "predicted_speedup", "measured_speedup", "what_if"} <= set(why)
    for bad in ("gpt-2", 3, ["tiny-a"]):
        with pytest.raises(gr.Error, match="model must be one of tiny-llama, tiny-a, tiny-b"):
            pg.run(PROMPT, 8, model=bad)
    assert pg.run(PROMPT, 4)["identical"]  # still serving


def test_links_carry_model_and_head_and_open_on_that_model():
    tok, b, e = tiny_stack()
    demo = build_demo(tok, b, e, examples=[], presets=list(SEEDS), loader=loader([]))
    ids = {c.elem_id: c for c in demo.blocks.values() if getattr(c, "elem_id", None)}
    load = next(f for f in demo.fns.values() if f.name == "load")
    query = {"prompt": "Hi", "model": "tiny-a", "head": "/tmp/some-head"}
    out = load.fn(types.SimpleNamespace(query_params=query))
    by_id = {o.elem_id: v for o, v in zip(load.outputs, out) if getattr(o, "elem_id", None)}
    assert by_id["model-choice"] == "tiny-a" and by_id["head-path"] == "/tmp/some-head"
    # the model menu's change (which the link's value fires) makes it this session's choice
    change = [d for d in demo.config["dependencies"] if [ids["model-choice"]._id, "change"] in
              [list(t) for t in d["targets"]]]
    assert len(change) == 1 and wired(demo, "switch")("tiny-a", None)[0] == Choice("tiny-a")
    values, notes = from_query({"head": "x" * 2000}, Limits())
    assert "head" not in values and notes


def test_picker_menu_and_models_refuse_what_cannot_load():
    pg = playground()
    picker = Picker(pg.models, list(SEEDS))
    assert picker.choices() == ("tiny-llama", "tiny-a", "tiny-b")
    with pytest.raises(ValueError, match="not offered"):
        picker.switch("nope")
    bare = Playground(*tiny_stack())  # no loader: only the start-up model
    with pytest.raises(gr.Error, match="could not be loaded"):
        bare.stream(PROMPT, *ARGS, choice=Choice("tiny-a")).__next__()
    assert bare.run(PROMPT, 4)["identical"]
