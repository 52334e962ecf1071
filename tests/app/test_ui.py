"""build_demo() with fake decoders: constructs without launching, stable elem_ids, the /run API, thin app.py."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import gradio as gr
import pytest

from app.ui import STATIC, build_demo, launch_options, load_examples
from core.engine.config import TreeConfig
from fakes import CharTokenizer, ReplayDecoder, baseline_events, eagle_events

ROOT = Path(__file__).resolve().parents[2]
ELEM_IDS = {"prompt", "run", "stop", "baseline-output", "eagle-output", "draft-tree", "stats"}


@pytest.fixture(scope="module")
def demo() -> gr.Blocks:
    b = ReplayDecoder("baseline", baseline_events("Hi!"))
    e = ReplayDecoder("eagle2", eagle_events("Hi!", [1]), note="untrained head: lossless but drafts are guesses")
    return build_demo(CharTokenizer(), b, e, info="Target **fake**")


def components(demo: gr.Blocks) -> dict[str, gr.components.Component]:
    return {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}


def test_build_demo_returns_blocks_without_launching(demo):
    assert isinstance(demo, gr.Blocks)
    assert demo.is_running is False and getattr(demo, "local_url", None) is None


def test_stable_elem_ids(demo):
    comps = components(demo)
    assert ELEM_IDS <= set(comps)
    assert isinstance(comps["draft-tree"], gr.Plot) and isinstance(comps["eagle-output"], gr.HTML)
    assert isinstance(comps["prompt"], gr.Textbox) and isinstance(comps["run"], gr.Button)


def test_settings_defaults(demo):
    comps = components(demo)
    d = TreeConfig()
    assert comps["max-new-tokens"].value == 128 and comps["temperature"].value == 0
    assert (comps["tree-total"].value, comps["tree-depth"].value, comps["tree-top-k"].value) == (
        d.total_tokens, d.depth, d.top_k)


def test_api_endpoints_and_concurrency(demo):
    fns = {f.api_name: f for f in demo.fns.values()}
    assert "run" in fns and fns["run"].api_visibility == "public"
    assert fns["run"].concurrency_limit == 1 and fns["run"].concurrency_id == "device"
    assert fns["stream"].concurrency_id == "device" and fns["stream"].concurrency_limit == 1
    info = demo.get_api_info()
    params = [p["parameter_name"] for p in info["named_endpoints"]["/run"]["parameters"]]
    assert params == ["prompt", "max_new_tokens", "temperature", "top_p", "seed", "total_tokens", "depth", "top_k",
                      "lookup", "compare", "stop_below", "messages", "stop", "model"]  # new fields last: positional callers keep working
    assert "/stream" not in info["named_endpoints"]  # the UI's streaming event stays undocumented


def test_stop_cancels_the_run_event(demo):
    cancels = [f for f in demo.fns.values() if f.cancels]
    stream_id = next(i for i, f in demo.fns.items() if f.api_name == "stream")
    assert any(stream_id in f.cancels for f in cancels)


def test_head_note_and_intro_are_shown(demo):
    text = " ".join(str(getattr(b, "value", "")) for b in demo.blocks.values())
    assert "untrained head" in text and "Feature-level drafting" in text and "Target **fake**" in text


def test_static_assets_and_launch_options():
    opts = launch_options()
    assert [Path(p) for p in opts["css_paths"]] == [STATIC / "style.css"]
    assert opts["allowed_paths"] == []  # static/ is not served (it holds weights and third-party pages)
    css = (STATIC / "style.css").read_text()
    for cls in [".tok.d0", ".tok.d1", ".tok.d12", "white-space: pre-wrap"]:
        assert cls in css
    ex = load_examples()
    assert len(ex) >= 6 and all(isinstance(e, str) and e for e in ex)
    assert all(e.rstrip().endswith(("?", ".")) for e in ex)  # chat (the default model): questions and requests
    raw = load_examples("raw")  # a base model continues text: completion-style openings
    assert len(raw) >= 6 and set(raw).isdisjoint(ex)


def test_app_py_is_thin_and_import_has_no_side_effects():
    src = (ROOT / "app.py").read_text()
    assert len(src.splitlines()) <= 70
    tree = ast.parse(src)
    top = [type(n).__name__ for n in tree.body]
    assert set(top) <= {"Expr", "ImportFrom", "Import", "FunctionDef", "If"}
    out = subprocess.run([sys.executable, "-c", "import runpy; m = runpy.run_path('app.py'); "
                          "print(m['parse_args'](['--share', '--port', '7861']))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "share=True" in out.stdout and "port=7861" in out.stdout


def test_no_module_level_user_state():
    """Handlers keep no per-user data on modules: every module-level name in app/ is a constant, function or class."""
    for f in (ROOT / "app").glob("*.py"):
        tree = ast.parse(f.read_text())
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                value = node.value
                assert not isinstance(value, (ast.List, ast.Dict, ast.Set)) or f.name == "__init__.py", (
                    f"{f.name}: mutable module-level value at line {node.lineno}")
