"""Event functions with decoders that replay canned StepEvents: race order, streamed outputs, Stop, validation, /run."""
from __future__ import annotations

import dataclasses
import types
from dataclasses import replace

import gradio as gr
import plotly.graph_objects as go
import pytest
import torch

from app.handlers import OUTPUTS, Playground
from app.inputs import RunSettings, make_config
from app.race import race
from app.state import RunRecord
from core.engine.config import TreeConfig
from core.engine.events import StepEvent
from fakes import CharTokenizer, ReplayDecoder, baseline_events, eagle_events

TEXT = "Hello world!"
ARGS = (64, 0.0, 1.0, 0, 24, 6, 6)  # max_new, temperature, top_p, seed, total_tokens, depth, top_k


def make(text_every=0.0, plot_every=0.0, base_ms=10.0, eagle_ms=12.0):
    b = ReplayDecoder("baseline", baseline_events(TEXT, ms=base_ms))
    e = ReplayDecoder("eagle2", eagle_events(TEXT, plan=[2, 3, 0], ms=eagle_ms))
    return Playground(CharTokenizer(), b, e, text_every=text_every, plot_every=plot_every), b, e


def is_skip(x) -> bool:
    return isinstance(x, dict) and x.get("__type__") == "update" and len(x) == 1


def test_race_advances_the_side_with_less_compute_time():
    def gen(name, ms, n):
        return iter([StepEvent(i, name, (i,), step_ms=ms, finished=i == n - 1) for i in range(n)])

    order = [(side, ev.step) for side, ev in race({"a": gen("a", 10, 4), "b": gen("b", 25, 2)})]
    # spent (a, b) before each pick: (0,0) a, (10,0) b, (10,25) a, (20,25) a, (30,25) b, (30,50) a
    assert order == [("a", 0), ("b", 0), ("a", 1), ("a", 2), ("b", 1), ("a", 3)]


def test_stream_yields_every_output_and_ends_with_full_results():
    pg, b, e = make()
    outs = list(pg.stream("Say: ", *ARGS))
    assert all(o is gr.skip() or (isinstance(o, tuple) and len(o) == len(OUTPUTS)) for o in outs)
    v = dict(zip(OUTPUTS, outs[-1]))
    base, eagle, stats, charts, tree, slider, record = (v[k] for k in (
        "baseline-output", "eagle-output", "stats", "stats-charts", "draft-tree", "step-slider", "state"))
    assert v["compare-output"] == gr.skip() and v["compare-tree"] == gr.skip()  # two lanes: the third is untouched
    assert "Hello world!" in base and "done" in base
    assert eagle.count('class="tok d0"') >= 5 and 'class="tok d3"' in eagle
    assert "token-identical" in stats and "speedup" in stats
    assert isinstance(charts, go.Figure) and isinstance(tree, go.Figure)
    assert isinstance(slider, gr.Slider) and slider.maximum == 4 and slider.interactive
    live = outs[0][-1]  # the record the state held while running
    assert isinstance(live, RunRecord) and live.ids("eagle") == live.ids("baseline") == [ord(c) for c in TEXT]
    # afterwards the state keeps only the compact record: the slider's trees, no prompt, no events
    assert isinstance(record, RunRecord) and record.tree_count == 4 and not (record.steps("baseline") or record.steps("eagle"))
    assert record.prompt == "" and record.prompt_ids == []
    assert b.calls[0][0] == [ord(c) for c in "Say: "] and b.calls[0][1].max_new_tokens == 64


def test_stream_updates_are_throttled():
    pg, b, e = make(text_every=1e9, plot_every=1e9)  # nothing due between the first and the final view
    outs = list(pg.stream("Say: ", *ARGS))
    assert len(outs) == 2 and "generating" in outs[0][0] and "done" in outs[1][0]


def test_stop_button_stops_both_decoders_after_the_current_step():
    pg, b, e = make()
    gen = pg.stream("Say: ", *ARGS)
    outs = [next(gen) for _ in range(4)]  # first view + 3 steps
    record = outs[0][-1]
    produced = b.yielded + e.yielded
    v = dict(zip(OUTPUTS, pg.finish(record)))
    base, eagle, stats = v["baseline-output"], v["eagle-output"], v["stats"]  # what the Stop button runs (it also cancels the event)
    assert record.stop and "stopped" in base and "stopped" in eagle
    rest = list(gen)  # the running handler notices the flag and ends with a final view
    assert b.yielded + e.yielded == produced  # no decoder produced another step
    assert b.closed and e.closed
    final = rest[-1]
    assert "stopped" in final[0] and "tokens / s" in final[2] and "so far" in final[2]
    assert len(record.steps("baseline")) + len(record.steps("eagle")) == produced


def test_panels_grow_in_compute_time_order():
    """Baseline steps cost 10 ms and EAGLE-2 steps 30 ms: the handler runs ~3 baseline steps per EAGLE-2 step."""
    log: list = []
    b = ReplayDecoder("baseline", baseline_events(TEXT, ms=10.0), log=log)
    e = ReplayDecoder("eagle2", eagle_events(TEXT, plan=[2, 3, 0], ms=30.0), log=log)
    pg = Playground(CharTokenizer(), b, e, text_every=0.0, plot_every=0.0)
    list(pg.stream("Say: ", *ARGS))
    spent = {"baseline": 0.0, "eagle2": 0.0}
    n_total = {"baseline": len(b.events), "eagle2": len(e.events)}
    done = {"baseline": 0, "eagle2": 0}
    for method, _ in log:
        other = "eagle2" if method == "baseline" else "baseline"
        assert spent[method] <= spent[other] or done[other] == n_total[other]  # the side behind always moves
        spent[method] += 10.0 if method == "baseline" else 30.0
        done[method] += 1
    assert log[:5] == [("baseline", 0), ("eagle2", 0), ("baseline", 1), ("baseline", 2), ("baseline", 3)]


def test_closing_the_stream_stops_both_decoders_and_keeps_partial_results():
    pg, b, e = make()
    gen = pg.stream("Say: ", *ARGS)
    outs = [next(gen) for _ in range(5)]
    gen.close()  # what Gradio does when Stop cancels the event
    assert b.closed and e.closed
    assert b.yielded + e.yielded == 4  # no decoder ran ahead
    record = outs[0][-1]
    v = dict(zip(OUTPUTS, pg.finish(record)))
    base, eagle, stats = v["baseline-output"], v["eagle-output"], v["stats"]
    assert "stopped" in base and "stopped" in eagle
    assert "so far" in stats or "token-identical" in stats


def test_finish_without_a_run_changes_nothing():
    pg, _, _ = make()
    assert all(o is gr.skip() or is_skip(o) for o in pg.finish(None))


def test_show_step_scrubs_every_verify_step():
    pg, _, e = make()
    record = list(pg.stream("Say: ", *ARGS))[-1][-1]
    assert len(record.tree_steps) == 4
    for i in range(1, 5):
        fig, other = pg.show_step(record, i)
        assert other == gr.skip()  # two lanes: no token-level tree to scrub
        acc = [t for t in fig.data if t.name == "accepted"][0]
        assert len(acc.text) == len(record.tree_steps[i - 1].accepted_path)
    assert pg.show_step(None, 1)[0].layout.annotations


@pytest.mark.parametrize("prompt,args,msg", [
    ("", ARGS, "prompt"),
    ("   ", ARGS, "prompt"),
    ("x", (0, 0.0, 1.0, 0, 24, 6, 6), "max new tokens"),
    ("x", (5000, 0.0, 1.0, 0, 24, 6, 6), "max new tokens"),
    ("x", (12.5, 0.0, 1.0, 0, 24, 6, 6), "whole number"),
    ("x", (16, -1.0, 1.0, 0, 24, 6, 6), "temperature"),
    ("x", (16, 0.0, 0.0, 0, 24, 6, 6), "top_p"),
    ("x", (16, 0.0, 1.0, -3, 24, 6, 6), "seed"),
    ("x", (16, 0.0, 1.0, 0, 0, 6, 6), "total_tokens"),
    ("x", (16, 0.0, 1.0, 0, 24, 99, 6), "depth"),
    ("x", (16, 0.0, 1.0, 0, 24, 6, "many"), "top-k"),
])
def test_invalid_inputs_become_clear_gradio_errors(prompt, args, msg):
    pg, b, e = make()
    with pytest.raises(gr.Error) as err:
        next(pg.stream(prompt, *args))
    assert msg in str(err.value.message)
    with pytest.raises(gr.Error):
        pg.run(prompt, *args)
    assert not b.calls and not e.calls


def test_make_config_accepts_integral_floats_from_sliders():
    cfg = make_config(128.0, 0, 1, 7.0, 24.0, 6.0, 6.0)
    assert cfg.max_new_tokens == 128 and cfg.sampling.seed == 7 and cfg.tree == TreeConfig(24, 6, 6)


def test_run_api_returns_texts_and_stats():
    pg, _, _ = make()
    out = pg.run("Say: ", 64)
    assert out["baseline_text"] == out["eagle_text"] == TEXT
    assert out["identical"] is True and out["greedy"] is True
    assert out["baseline"]["new_tokens"] == out["eagle"]["new_tokens"] == len(TEXT)
    assert out["eagle"]["tau"] == pytest.approx(12 / 5)
    assert out["speedup"] == pytest.approx(2.0)


def test_run_api_defaults_come_from_the_tree_planned_for_the_temperature():
    """/run without tree settings gets the tree the UI shows for that temperature: the greedy plan at T=0, the
    sampled plan otherwise (--tree auto plans both); settings it does give override only themselves."""
    from core.engine.autotree import TreePlan

    pg, _, _ = make()
    assert pg.run("Say: ", 64)["tree"] == dataclasses.asdict(TreeConfig())  # no plan: the engine default
    greedy, sampled = TreeConfig(12, 2, 8, 10), TreeConfig(8, 1, 8, 0)
    pg.trees = TreePlan(greedy, sampled, "auto")
    assert pg.run("Say: ", 64)["tree"] == dataclasses.asdict(greedy)
    assert pg.run("Say: ", 64, 0.8)["tree"] == dataclasses.asdict(sampled)
    assert pg.run("Say: ", 64, 0.8, 1.0, 0, 5)["tree"] == dataclasses.asdict(TreeConfig(5, 1, 8, 0))
    assert pg.run("Say: ", 64, 0.0, 1.0, 0, None, None, None, 0)["tree"]["lookup"] == 0
    # dynamic depth: planned with the rest, or given; the tree that ran says which
    assert pg.run("Say: ", 64, stop_below=0.3)["tree"] == dataclasses.asdict(replace(greedy, stop_below=0.3))
    for bad in (1.0, -0.1, float("nan"), "x"):
        with pytest.raises(gr.Error, match="stop below"):
            pg.run("Say: ", 64, stop_below=bad)


def test_tree_sliders_follow_the_temperature_until_the_user_moves_them():
    """The UI: moving the temperature sets the tree sliders to that regime's plan, unless a tree slider was moved."""
    from app.ui import build_demo
    from core.engine.autotree import TreePlan
    from fakes import tiny_stack

    greedy, sampled = TreeConfig(12, 4, 8, 10, stop_below=0.2), TreeConfig(8, 1, 8, 0)
    pg, _, _ = make()
    pg.trees = TreePlan(greedy, sampled, "auto")
    assert pg.planned_tree(0.7, False) == [8, 1, 8, 0, 0.0]
    assert pg.planned_tree(0.0, False) == [12, 4, 8, 10, 0.2]
    assert all(is_skip(x) for x in pg.planned_tree(0.7, True))  # the user's own tree stays
    assert all(is_skip(x) for x in pg.planned_tree("warm", False))  # odd input changes nothing here

    tok, baseline, eagle = tiny_stack()
    demo = build_demo(tok, baseline, eagle, tree=TreePlan(greedy, sampled, "auto"))
    ids = {c.elem_id: c for c in demo.blocks.values() if getattr(c, "elem_id", None)}
    names = ("tree-total", "tree-depth", "tree-top-k", "tree-lookup", "tree-stop-below")
    assert [ids[k].value for k in names] == [12, 4, 8, 10, 0.2]
    deps = demo.config["dependencies"]
    sliders = {ids[k]._id for k in names}
    follow = [d for d in deps if [ids["temperature"]._id, "input"] in [list(t) for t in d["targets"]]]
    assert len(follow) == 1 and set(follow[0]["outputs"]) == sliders


def test_prompt_longer_than_the_context_is_refused():
    pg, b, _ = make()
    b.target = type("T", (), {"max_positions": 40})()
    with pytest.raises(gr.Error, match="at most"):
        pg.run("x" * 30, 16)
    assert pg.run("x" * 10, 16)["identical"]


def test_zero_gpu_wraps_the_device_work_with_a_duration(monkeypatch):
    """With the `spaces` package present (Hugging Face ZeroGPU) the race runs under spaces.GPU(duration=...)."""
    import types

    from app.zerogpu import gpu_seconds

    seen = {}

    def GPU(duration):
        def wrap(fn):
            def inner(*args):
                seen["duration"] = duration(*args)
                seen["stop"] = args[4]  # (prompt_ids, cfg, lanes, compare, should_stop)
                return fn(*args)
            return inner
        return wrap

    monkeypatch.setitem(__import__("sys").modules, "spaces", types.SimpleNamespace(GPU=GPU))
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")  # ZeroGPU hardware sets it; `spaces` alone is on every Space
    pg, _, _ = make()
    assert pg.zero_gpu
    assert pg.run("Say: ", 300)["identical"]
    assert seen["duration"] == gpu_seconds(300) and seen["stop"] is None  # flags cannot cross into the worker
    assert gpu_seconds(1024) > gpu_seconds(128) >= 20


def test_spaces_installed_without_zero_gpu_keeps_every_limit(monkeypatch):
    """A CPU Space has `spaces` installed too: without ZeroGPU the race is not wrapped and the decoders still get
    the stop check (Stop button, client gone, time budget)."""
    import types

    called = []
    monkeypatch.setitem(__import__("sys").modules, "spaces",
                        types.SimpleNamespace(GPU=lambda **k: called.append(k)))
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    pg, _, _ = make()
    assert not pg.zero_gpu and not called
    seen = {}
    real = pg._race

    def spy(*args):
        seen["stop"] = args[4]
        return real(*args)

    pg._race = spy
    assert pg.run("Say: ", 8)["identical"]
    assert callable(seen["stop"])


def test_tree_flag_keeps_defaults_parses_or_measures():
    """app.py --tree: absent keeps the engine default, 'T,D,K' is used for every request, 'auto' measures this
    machine and plans one tree for greedy and one for sampled requests (core/engine/autotree.py)."""
    from core.engine.autotree import TreePlan, auto_or_parse
    from core.engine.config import TreeConfig
    from fakes import tiny_stack

    tok, _, eagle = tiny_stack()
    assert auto_or_parse(None, eagle, tok) == TreePlan.fixed(TreeConfig(), "engine default")
    assert auto_or_parse("10,4,3", eagle, tok) == TreePlan.fixed(TreeConfig(10, 4, 3), "given")
    plan = auto_or_parse("auto", eagle, tok)
    assert plan.source.startswith("auto")
    for chosen in (plan.greedy, plan.sampled):
        assert isinstance(chosen, TreeConfig) and 1 <= chosen.total_tokens <= 64
    with pytest.raises(ValueError, match="total_tokens,depth,top_k"):
        auto_or_parse("ten", eagle, tok)


def test_chat_mode_wraps_the_prompt_and_the_ui_says_so():
    """A tokenizer with a chat template: prompts become one user turn (after the system prompt); the UI names the mode.
    Raw mode (and any base model) encodes the text as is."""
    from app.ui import build_demo
    from fakes import tiny_stack

    tok, baseline, eagle = tiny_stack()
    raw = Playground(tok, baseline, eagle)
    assert raw.mode == "raw" and raw.encode("the fox") == list(tok.encode("the fox"))
    with pytest.raises(ValueError, match="chat_template"):
        Playground(tok, baseline, eagle, prompt_mode="chat")
    tok.chat_template = ("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                         "{% if add_generation_prompt %}[assistant]{% endif %}")
    chat = Playground(tok, baseline, eagle, system="Be brief.")
    assert chat.mode == "chat"
    assert chat.encode("the fox") == list(tok.encode("[system]Be brief.[user]the fox[assistant]"))
    record, _ = chat.prepare(RunSettings("the fox", 4, 0.0, 1.0, 0, 4, 2, 2))
    assert record.prompt_ids == chat.encode("the fox")
    assert Playground(tok, baseline, eagle, prompt_mode="raw").encode("the fox") == list(tok.encode("the fox"))
    for mode, words in (("auto", "user turn of the model's chat template"), ("raw", "raw text")):
        demo = build_demo(tok, baseline, eagle, prompt_mode=mode)
        shown = [b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) == "prompt-mode"]
        assert shown and words in shown[0]


def with_margins(events: list[StepEvent], margins: dict[int, float]) -> list[StepEvent]:
    """Copy of `events` recording a top-2 margin per token (0.5 unless given by token index) at a top logit of 20."""
    out, i = [], 0
    for e in events:
        n = len(e.new_token_ids)
        out.append(dataclasses.replace(e, margins=tuple(margins.get(i + k, 0.5) for k in range(n)),
                                       top_logits=(20.0,) * n))
        i += n
    return out


@pytest.mark.parametrize("margin, label", [(0.125, "numerical near tie"), (3.0, "mismatch")])
def test_divergence_is_labelled_in_the_badge_and_returned_by_run(margin, label):
    """Issue 15: a bf16 run whose outputs part ways at token 7 shows where and both margins, labelled a near tie
    when both margins together are within 16 bf16 ulps at the top logit (16 x 0.125 at 20), a mismatch otherwise;
    /run returns the same record beside `identical`."""
    other = TEXT[:6] + "W" + TEXT[7:]
    b = ReplayDecoder("baseline", with_margins(baseline_events(TEXT), {6: margin}))
    e = ReplayDecoder("eagle2", with_margins(eagle_events(other, plan=[2, 3, 0]), {6: 0.5}))
    b.target = types.SimpleNamespace(name="fake", dtype=torch.bfloat16, max_positions=4096)
    pg = Playground(CharTokenizer(), b, e, text_every=0.0, plot_every=0.0)
    out = pg.run("Say: ", 64)
    assert out["identical"] is False
    assert out["divergence"] == {"index": 6, "baseline_margin": margin, "method_margin": 0.5,
                                 "near_tie": label != "mismatch", "tolerance": 2.0, "label": label, "dtype": "bf16"}
    stats = list(pg.stream("Say: ", *ARGS))[-1][OUTPUTS.index("stats")]
    assert "at token 7" in stats and "class=\"why\"" in stats
    assert ("numerical near tie (bf16)" in stats) == (label != "mismatch")
    assert ("✗ mismatch" in stats) == (label == "mismatch")


def test_identical_greedy_run_keeps_the_plain_badge_and_no_divergence():
    pg, _, _ = make()
    assert pg.run("Say: ", 64)["divergence"] is None
    stats = list(pg.stream("Say: ", *ARGS))[-1][OUTPUTS.index("stats")]
    assert "token-identical" in stats and "near tie" not in stats


def three_lane_playground(**kw):
    """The tiny real stack with both token-level lanes (an untrained Medusa head, prompt lookup) beside EAGLE-2."""
    from conftest import tiny_drafter
    from fakes import tiny_stack

    from core.engine.eagle import Eagle2Decoder

    tok, baseline, eagle = tiny_stack()
    t = baseline.target
    compare = {"medusa": Eagle2Decoder(t, tiny_drafter("medusa", t, seed=2)),
               "lookup": Eagle2Decoder(t, tiny_drafter("lookup", t))}
    return Playground(tok, baseline, eagle, compare=compare, **kw)


@pytest.mark.parametrize("lane", ["medusa", "lookup"])
def test_three_lanes_race_and_render(lane):
    """compare=<token-level drafter>: a third lane races in the same compute-time order, is coloured by depth like
    EAGLE-2's, gets its own tree and its own statistics column, and decodes the same tokens at T=0."""
    pg = three_lane_playground(text_every=0.0, plot_every=0.0)
    outs = list(pg.stream("Once upon a time", 24, 0.0, 1.0, 0, 12, 4, 3, 6, lane))
    v = dict(zip(OUTPUTS, outs[-1]))
    assert 'class="tok d0"' in v["compare-output"] and "done" in v["compare-output"]
    table = v["stats"]
    head = table.split("<thead>")[1].split("</thead>")[0]
    assert head.count("<th>") == 4 and ("Medusa" if lane == "medusa" else "Prompt lookup") in head
    assert "EAGLE-2 vs" in table and "token-identical" in table
    assert isinstance(v["compare-tree"], go.Figure) and isinstance(v["draft-tree"], go.Figure)
    names = {t.name for t in v["stats-charts"].data}
    assert {"EAGLE-2", "Medusa" if lane == "medusa" else "Prompt lookup"} <= names  # both lanes' acceptance
    record = v["state"]
    assert record.compare_kind == lane and record.lanes == ("baseline", "compare", "eagle")
    if lane == "medusa":  # a head that drafts: its trees are kept for the step slider too
        assert record.lane_tree_count("compare") > 0
        fig, other = pg.show_step(record, 1)
        assert other.layout.title.text.startswith("Medusa step 1 of")
    live = outs[0][-1]
    assert live.ids("compare") == live.ids("baseline") == live.ids("eagle")


def test_run_returns_every_lane():
    pg = three_lane_playground()
    out = pg.run("Once upon a time", 16, compare="medusa")
    assert out["lanes"] == ["baseline", "medusa", "eagle2"] and out["compare_method"] == "medusa"
    assert out["compare_identical"] and out["identical"]
    assert out["compare_token_ids"] == out["baseline_token_ids"] and out["compare"]["new_tokens"] == 16
    assert out["compare_speedup"] > 0 and out["eagle_vs_compare"] > 0
    two = pg.run("Once upon a time", 8)
    assert two["lanes"] == ["baseline", "eagle2"] and "compare_text" not in two
    with pytest.raises(gr.Error, match="compare must be one of"):
        pg.run("Once upon a time", 8, compare="medusa-2")
