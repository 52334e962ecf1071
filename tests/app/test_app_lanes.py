"""The app's lanes as data (app/lanes.py), one record of a finished run (app/result.py) and the pure input boundary
(app/inputs.py prepare): the same facts reach /run, the history and the downloads, and app/ reaches no lane by
attribute name."""
from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest

from app.handlers import Playground
from app.history import record_file
from app.inputs import Limits, RequestError, RunSettings, Served, prepare
from app.lanes import BASELINE, EAGLE, TOKEN_LEVEL, lane_rows
from app.result import api_result
from core.engine.autotree import TreePlan
from core.engine.config import TreeConfig
from core.prompt import PromptError
from fakes import CharTokenizer, ReplayDecoder, baseline_events, eagle_events

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Hello world!"


def make(**kw) -> Playground:
    return Playground(CharTokenizer(), ReplayDecoder("baseline", baseline_events(TEXT)),
                      ReplayDecoder("eagle2", eagle_events(TEXT, plan=[2, 3, 0])), text_every=0, plot_every=0,
                      charts_every=0, **kw)


def test_one_lanes_table_names_every_lane_of_a_request():
    assert lane_rows() == (BASELINE, EAGLE)
    assert [r.slot for r in lane_rows("medusa")] == ["baseline", "compare", "eagle"]
    assert [r.method for r in lane_rows("lookup")] == ["baseline", "lookup", "eagle2"]
    assert {r.title for r in TOKEN_LEVEL.values()} == {"Medusa", "Prompt lookup"}
    assert not BASELINE.drafts and EAGLE.drafts


def test_prepare_is_pure_and_refuses_with_value_errors():
    """app/inputs.py prepare needs no gradio and no Playground: it returns a fresh record and config or raises a
    ValueError (RequestError) with the one-line message the UI shows."""
    served = Served("fake", CharTokenizer(), "raw", TreePlan.fixed(TreeConfig(8, 3, 2), "given"))
    record, cfg = prepare(RunSettings("Say: ", 16), served, Limits())
    assert record.prompt_ids == [ord(c) for c in "Say: "] and record.events == {} and record.model == "fake"
    assert cfg.tree == TreeConfig(8, 3, 2) and cfg.max_new_tokens == 16
    for settings, words in ((RunSettings("  "), "Enter a prompt"), (RunSettings("x", 0), "max new tokens"),
                            (RunSettings("x", compare="medusa"), "not available"),
                            (RunSettings("x", messages=[]), "chat model")):
        with pytest.raises(ValueError, match=words) as err:
            prepare(settings, served, Limits())
        assert isinstance(err.value, RequestError) and err.value.title
    short = Served("fake", CharTokenizer(), "raw", served.trees, max_positions=30)
    with pytest.raises(RequestError, match="at most"):
        prepare(RunSettings("x" * 20, 16), short, Limits())
    assert issubclass(RequestError, ValueError) and issubclass(PromptError, ValueError)


def test_run_history_and_download_share_one_record():
    """The same run through the UI's stream (history, download) and through /run: the same texts, ids, statistics
    and speedup, from one run_result()."""
    pg = make(verify_ms={1: 5.0, 4: 8.0, 16: 12.0})
    out = pg.run("Say: ", 64)
    record = list(pg.stream("Say: ", 64, 0.0, 1.0, 0, None, None, None))[-1][-1]
    summary = record.finished_run["summary"]
    assert api_result(summary, "none") | {"choices": None, "model_status": ""} == out
    assert summary["lanes"]["eagle2"]["speedup"] == summary["speedup"] == out["speedup"]
    assert out["why"] and out["why"][0]["what_if"]  # verify_ms reached the "why" arithmetic
    download = json.loads(Path(record_file(record)).read_text())
    assert download["speedup"] == out["speedup"] and download["lanes"]["eagle2"]["token_ids"] == out[
        "eagle_token_ids"]


def test_app_reaches_no_lane_by_attribute_name_and_reexports_nothing():
    """No getattr/setattr with a lane name in app/, and no `noqa: F401` re-export: every import names the module
    that defines the name."""
    for f in sorted((ROOT / "app").glob("*.py")):
        src = f.read_text()
        assert "noqa: F401" not in src or f.name == "zerogpu.py", f.name  # zerogpu imports `spaces` for its effect
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "setattr"):
                name = node.args[1]
                assert not (isinstance(name, ast.Name) and name.id in ("side", "lane", "s")), (f.name, node.lineno)
                assert not (isinstance(name, ast.Constant) and name.value in ("baseline", "eagle", "compare"))


def defined_names(module: str) -> set[str] | None:
    """The names a module of this project defines at its top level (None for a package or a module not found)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.submodule_search_locations is not None or not spec.origin:
        return None
    names = set()
    for node in ast.parse(Path(spec.origin).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_every_app_import_names_the_module_that_defines_the_name():
    """app/ imports each project name from the module that defines it, never through another module's re-export."""
    wrong = []
    for f in sorted((ROOT / "app").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("app", "core")):
                continue
            names = defined_names(node.module)
            wrong += [f"{f.name}: {node.module}.{a.name}" for a in node.names if names is not None
                      and a.name not in names]
    assert not wrong, wrong
