"""ZeroGPU: detected from the `spaces` package's own configuration (or SPACES_ZERO_GPU), never from the package
being importable; app.py's start-up with `spaces` present and ZeroGPU off keeps every limit, and with it on the race
runs under spaces.GPU with a duration that follows the request, the models go to CUDA and start-up does no device
work."""
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from app import zerogpu

ROOT = Path(__file__).resolve().parents[2]


def fake_spaces(zero_gpu: bool, durations: list) -> types.ModuleType:
    """A `spaces` package as installed on every Space: its Config says whether this is ZeroGPU hardware; GPU(duration)
    records the duration the wrapped call declares and runs it (the real one forks a worker)."""
    mod = types.ModuleType("spaces")
    mod.config = types.SimpleNamespace(Config=types.SimpleNamespace(zero_gpu=zero_gpu))

    def GPU(duration):
        def wrap(fn):
            def inner(*args):
                durations.append(duration(*args))
                return fn(*args)
            return inner
        return wrap

    mod.GPU = GPU
    return mod


def test_detection_reads_the_configuration_not_the_import(monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    monkeypatch.setitem(sys.modules, "spaces", fake_spaces(False, []))
    assert not zerogpu.enabled() and zerogpu.spaces_module() is None  # a CPU Space: installed, not ZeroGPU
    monkeypatch.setitem(sys.modules, "spaces", fake_spaces(True, []))
    assert zerogpu.enabled() and zerogpu.spaces_module() is sys.modules["spaces"]
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setitem(sys.modules, "spaces", fake_spaces(False, []))
    assert not zerogpu.enabled()  # the package's own setting decides when it is there
    assert zerogpu.enabled({"SPACES_ZERO_GPU": "True"}) and not zerogpu.enabled({"SPACES_ZERO_GPU": "yes"})
    assert not zerogpu.enabled({})  # `spaces` reads only 1/t/true


def test_gpu_duration_follows_tokens_and_lanes_and_stays_under_the_budget():
    assert zerogpu.gpu_seconds(64) < zerogpu.gpu_seconds(512) < zerogpu.gpu_seconds(1024)
    assert zerogpu.gpu_seconds(512, lanes=3) > zerogpu.gpu_seconds(512, lanes=2)
    assert zerogpu.gpu_seconds(1024, lanes=3, cap=60) == 60
    assert zerogpu.gpu_seconds(128) <= 30  # a short answer reserves seconds, not minutes


def run_app(monkeypatch, env: dict):
    """app.py main() with the model loading, serving and blocking replaced by a tiny random stack; returns what
    start-up did: the load arguments, whether it warmed up, the Playground it built, and the printed lines."""
    import app.startup
    import app.ui
    import core.pipeline
    from fakes import tiny_stack

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    seen = {"warm": 0, "pg": None}
    tok, baseline, eagle = tiny_stack()

    def build_decoders(model, head, device, dtype, trust_remote_code=False, choices_file=None):
        seen["load"] = (device, dtype)
        return baseline.target, tok, baseline, eagle

    real_pg = app.ui.Playground

    class Recorded(real_pg):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            seen["pg"] = self

    def warm(*a, **k):
        seen["warm"] += 1

    monkeypatch.setattr(core.pipeline, "build_decoders", build_decoders)
    monkeypatch.setattr(app.startup, "warm_up", warm)
    monkeypatch.setattr(app.startup, "compare_decoders", lambda target, medusa=None: {})
    monkeypatch.setattr(app.ui, "Playground", Recorded)
    monkeypatch.setattr(app.ui, "serve", lambda demo, *a: "http://127.0.0.1:0")
    monkeypatch.setattr("gradio.Blocks.block_thread", lambda self: None)
    spec = importlib.util.spec_from_file_location("app_entry", ROOT / "app.py")
    entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry)
    entry.main([])
    return seen


@pytest.fixture
def env(monkeypatch):
    import os

    for k in list(os.environ):
        if k.startswith("EAGLE_") or k == "SPACES_ZERO_GPU":
            monkeypatch.delenv(k)
    return monkeypatch


def test_startup_on_a_cpu_space_keeps_every_limit(env, capsys):
    durations = []
    env.setitem(sys.modules, "spaces", fake_spaces(False, durations))
    seen = run_app(env, {"EAGLE_REQUEST_SECONDS": "1e-9", "EAGLE_DEVICE": "cpu"})
    pg = seen["pg"]
    assert seen["load"] == ("cpu", None) and seen["warm"] == 1 and not pg.zero_gpu
    r = pg.run("hello there", 64)
    assert "time budget" in r["note"] and not durations  # the budget stopped it; no GPU reservation was made
    assert "ready at" in capsys.readouterr().out


def test_startup_on_zero_gpu_reserves_per_request_and_touches_no_device(env, capsys):
    durations = []
    env.setitem(sys.modules, "spaces", fake_spaces(True, durations))
    seen = run_app(env, {"EAGLE_TREE": "auto", "EAGLE_REQUEST_SECONDS": "120"})
    pg = seen["pg"]
    assert seen["load"] == ("cuda", "bf16") and seen["warm"] == 0 and pg.zero_gpu
    assert pg.trees.source == "engine default"  # 'auto' would time verify passes on a GPU not yet attached
    out = capsys.readouterr().out
    assert "ZeroGPU" in out and "ready at" in out
    pg.run("hello there", 32)
    pg.run("hello there", 256)
    assert durations == [zerogpu.gpu_seconds(32, 2, 120), zerogpu.gpu_seconds(256, 2, 120)]
