"""Hardening: bad input at every boundary (the /run API of a launched app, the generate / bench / train CLIs) gets a
clear one-line error while the app keeps serving; odd unicode works; NaN from a broken head and out-of-memory stop
one request only; one JSON log line per request without the prompt; safe-loading defaults."""
from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import gradio as gr
import pytest
import torch

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client  # noqa: E402

from app.handlers import Playground  # noqa: E402
from app.ui import STATIC, build_demo, launch_options  # noqa: E402
from core.config import DecodeConfig, DecodeError  # noqa: E402
from fakes import ReplayDecoder, baseline_events, tiny_stack  # noqa: E402

PROMPT = "Once upon a time"
CAP_NEW, CAP_PROMPT = 64, 48
GOOD = (PROMPT, 8, 0.0, 1.0, 0, 24, 6, 6, 10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    os.environ["GRADIO_TEMP_DIR"] = str(tmp_path_factory.mktemp("gradio"))
    tok, baseline, eagle = tiny_stack()
    demo = build_demo(tok, baseline, eagle, max_new_tokens=CAP_NEW, max_prompt_tokens=CAP_PROMPT)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **launch_options())
    client = Client(url, verbose=False)
    yield client
    client.close()
    demo.close()


def args(**kw):
    names = ("prompt", "max_new_tokens", "temperature", "top_p", "seed", "total_tokens", "depth", "top_k", "lookup")
    return tuple(kw.get(n, v) for n, v in zip(names, GOOD))


# (inputs, pattern the error message must contain)
API_BAD = [
    (args(prompt=""), "Enter a prompt"),
    (args(prompt="  \n\t "), "Enter a prompt"),
    (args(prompt="the fox " * 200), "tokens; at most"),
    (args(max_new_tokens=0), "max new tokens must be between 1 and 64"),
    (args(max_new_tokens=-5), "max new tokens must be between"),
    (args(max_new_tokens=CAP_NEW + 1), "max new tokens must be between 1 and 64"),
    (args(max_new_tokens=2.5), "whole number"),
    (args(max_new_tokens="ten"), "whole number"),
    (args(max_new_tokens=True), "whole number"),
    (args(temperature=-1.0), "temperature must be in"),
    (args(temperature="nan"), "temperature must be a number"),  # JSON itself cannot carry NaN / inf
    (args(top_p="Infinity"), "top-p must be a number"),
    (args(temperature="hot"), "temperature must be a number"),
    (args(top_p=0.0), "top_p must be in"),
    (args(top_p=1.5), "top_p must be in"),
    (args(seed=-1), "seed must be between"),
    (args(seed=1.5), "seed must be a whole number"),
    (args(total_tokens=0), "total_tokens must be between"),
    (args(total_tokens=10_000), "total_tokens must be between"),
    (args(depth=0), "depth must be between"),
    (args(top_k=0), "top_k must be between"),
    (args(top_k=None), "tree top-k must be a whole number"),
    (args(lookup=-1), "lookup must be between"),
    (args(lookup=65), "lookup must be between"),
    (args(lookup="many"), "context lookup must be a whole number"),
]


@pytest.mark.parametrize("inputs,pattern", API_BAD, ids=[f"api{i}" for i in range(len(API_BAD))])
def test_api_rejects_bad_input_and_keeps_serving(server, inputs, pattern):
    with pytest.raises(Exception, match=pattern):
        server.predict(*inputs, api_name="/run")


@pytest.mark.parametrize("prompt", ["<bos><eos>", "a\u0000b", "שלום עולם مرحبا", "🦅🚀 emoji \u200d zwj",
                                    "e\u0301 combining", "\ufeffbom"])
def test_odd_unicode_prompts_work(server, prompt):
    out = server.predict(*args(prompt=prompt, max_new_tokens=6), api_name="/run")
    assert out["identical"] is True and len(out["eagle_token_ids"]) == 6


def test_lone_surrogate_is_a_clear_error_or_works():
    """JSON clients cannot send a lone surrogate (not UTF-8); a Python caller can: the tokenizer refuses it, and the
    handler turns that into a clear error instead of a crash."""
    tok, baseline, eagle = tiny_stack()
    pg = Playground(tok, baseline, eagle)
    try:
        out = pg.run("a\ud800b", 4)
    except gr.Error as e:
        assert "cannot be tokenized" in str(e), str(e)
    else:
        assert out["identical"] is True
    assert pg.run(PROMPT, 4)["identical"] is True


@pytest.mark.parametrize("field,value", [("temperature", float("nan")), ("temperature", float("inf")),
                                         ("top_p", float("nan")), ("top_p", float("-inf")),
                                         ("max_new_tokens", float("nan")), ("seed", float("inf"))])
def test_handler_rejects_nan_and_inf(field, value):
    """What a Python caller of the handler (or a lenient JSON parser) could pass: NaN / inf in any numeric field."""
    tok, baseline, eagle = tiny_stack()
    with pytest.raises(gr.Error, match="finite|whole number|must be"):
        names = ("prompt", "max_new_tokens", "temperature", "top_p", "seed", "total_tokens", "depth", "top_k", "lookup")
        Playground(tok, baseline, eagle).run(**dict(zip(names, args(**{field: value}))))


def test_server_still_answers_after_all_bad_inputs(server):
    out = server.predict(*GOOD, api_name="/run")
    assert out["identical"] is True and len(out["baseline_token_ids"]) == 8


# ------------------------------------------------------------------------------------------ CLIs, in process

@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    """A head for a target of another width (mismatch) and a question file for core.bench."""
    from conftest import tiny_target

    from core.draft_head import HeadConfig, init_head, save_head

    root = tmp_path_factory.mktemp("hard")
    save_head(init_head(HeadConfig.for_target(128, 128)), root / "wide_head")
    (root / "q.jsonl").write_text(json.dumps({"question_id": 1, "category": "writing", "turns": ["Hi"]}) + "\n")
    return root, tiny_target


@pytest.fixture
def tiny_loader(monkeypatch, tiny_folders):
    """core.pipeline loads the tiny Llama + a word tokenizer instead of a real model (the head path stays real)."""
    from test_generate_cli import word_tokenizer

    from core import pipeline
    from core.models import resolve_model

    _, tiny_target = tiny_folders

    def load(name=None, device=None, dtype=None, trust_remote_code=False):
        if name:
            resolve_model(name)  # the real name check (unknown names fail here)
        return tiny_target("llama"), word_tokenizer()

    monkeypatch.setattr(pipeline, "load_target", load)
    monkeypatch.setattr(pipeline, "default_head", lambda model: None)  # the shipped Gemma head is not the tiny model's


def gen_argv(*extra):
    return ["--prompt", "w3 w4 w5", "--max-new-tokens", "4", *extra]


CLI_BAD = [
    ("generate", gen_argv("--prompt", "   "), "prompt is empty"),
    ("generate", gen_argv("--max-new-tokens", "0"), "max_new_tokens must be between"),
    ("generate", gen_argv("--max-new-tokens", "abc"), "invalid int value"),
    ("generate", gen_argv("--max-new-tokens", "2.5"), "invalid int value"),
    ("generate", gen_argv("--temperature", "nan"), "temperature must be finite"),
    ("generate", gen_argv("--temperature", "inf"), "temperature must be finite"),
    ("generate", gen_argv("--top-p", "2"), "top_p must be in"),
    ("generate", gen_argv("--seed", "-3"), "seed must be between"),
    ("generate", gen_argv("--depth", "0"), "depth must be between"),
    ("generate", gen_argv("--top-k", "999"), "top_k must be between"),
    ("generate", gen_argv("--model", "no-such-model"), "unknown model"),
    ("generate", gen_argv("--head", "/no/such/head"), "is not a folder"),
    ("generate", gen_argv("--head", "{root}/wide_head"), "hidden"),
    ("generate", ["--prompt", " ".join(["w7"] * 2100), "--max-new-tokens", "4"], "fit in the model's context"),
    ("bench", ["--questions", "{root}/q.jsonl", "--max-new-tokens", "0", "--json", "{root}/o.json"],
     "--max-new-tokens must be >= 1"),
    ("bench", ["--questions", "{root}/q.jsonl", "--max-new-tokens", "4", "--methods", "magic", "--json", "x"],
     "unknown method"),
    ("bench", ["--questions", "{root}/q.jsonl", "--max-new-tokens", "4", "--temperature", "inf", "--json", "x"],
     "temperature must be finite"),
    ("bench", ["--questions", "{root}/q.jsonl", "--max-new-tokens", "4", "--tree", "0,1,1", "--json", "x"],
     "total_tokens must be between"),
    ("bench", ["--questions", "/no/file.jsonl", "--max-new-tokens", "4", "--json", "x"], "not found"),
    ("train", ["--out", "{root}/t", "--lr", "nan"], "--lr must be a positive finite number"),
    ("train", ["--out", "{root}/t", "--batch", "0"], "--batch must be >= 1"),
    ("train", ["--out", "{root}/t", "--sample-share", "1.5"], "--sample-share must be in"),
]


def cli_main(which: str):
    if which == "generate":
        from core.generate import main
    elif which == "bench":
        from core.bench import main
    else:
        from core.train.__main__ import main
    return main


@pytest.mark.parametrize("which,argv,pattern", CLI_BAD, ids=[f"{c[0]}{i}" for i, c in enumerate(CLI_BAD)])
def test_cli_bad_input_one_line_nonzero_exit(tiny_loader, tiny_folders, capsys, which, argv, pattern):
    root, _ = tiny_folders
    argv = [a.replace("{root}", str(root)) for a in argv]
    try:
        rc = cli_main(which)(argv)
    except SystemExit as e:  # argparse errors
        rc = e.code
    err = capsys.readouterr().err.strip()
    assert rc not in (0, None), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert pattern in err, err


def test_cli_odd_unicode_prompt_works(tiny_loader, capsys):
    from core.generate import main

    for prompt in ["<bos><eos> w3", "w3 \u0000 w4", "שלום w5 🦅"]:
        assert main(["--prompt", prompt, "--max-new-tokens", "3", "--json"]) == 0
        assert len(json.loads(capsys.readouterr().out)["token_ids"]) == 3


# ------------------------------------------------------------------------------------------ NaN head, OOM

def nan_stack():
    tok, baseline, eagle = tiny_stack()
    with torch.no_grad():
        for p in eagle.drafter.head.parameters():
            p.fill_(float("nan"))
    return tok, baseline, eagle


def test_nan_head_raises_decode_error_and_frees_caches(monkeypatch):
    from core import kv_cache

    freed = []
    real_free = kv_cache.free
    monkeypatch.setattr(kv_cache, "free", lambda c: (freed.append(c), real_free(c)))
    tok, _, eagle = nan_stack()
    with pytest.raises(DecodeError, match="NaN or inf"):
        list(eagle.generate(list(tok.encode(PROMPT)), DecodeConfig(max_new_tokens=8)))
    assert freed and all(not layer.is_initialized or layer.keys is None or layer.keys.numel() == 0
                         for c in freed for layer in c.layers)


def test_nan_head_fails_one_request_in_the_app_then_good_head_serves(caplog):
    tok, baseline, eagle = nan_stack()
    pg = Playground(tok, baseline, eagle)
    with caplog.at_level(logging.INFO, logger="eagle_playground.requests"):
        with pytest.raises(gr.Error, match="NaN or inf"):
            pg.run(PROMPT, 8)
    line = json.loads(caplog.records[-1].getMessage())
    assert line["outcome"] == "error" and "NaN" in line["error"]
    tok, baseline, eagle = tiny_stack()
    assert Playground(tok, baseline, eagle).run(PROMPT, 8)["identical"] is True


class OOMDecoder(ReplayDecoder):
    def __init__(self, exc):
        super().__init__("eagle2", [])
        self.exc = exc

    def generate(self, prompt_ids, cfg, should_stop=None):
        try:
            yield from ()
            raise self.exc
        finally:
            self.closed = True


@pytest.mark.parametrize("exc", [MemoryError(), torch.OutOfMemoryError("CUDA out of memory")])
def test_out_of_memory_fails_alone_with_a_message(exc):
    from fakes import CharTokenizer

    base = ReplayDecoder("baseline", baseline_events("hello world"))
    pg = Playground(CharTokenizer(), base, OOMDecoder(exc))
    with pytest.raises(gr.Error, match="Out of memory"):
        pg.run("hi", 8)
    assert base.closed  # the other decoder was closed (its caches freed) too
    ok = Playground(CharTokenizer(), ReplayDecoder("baseline", baseline_events("abc")),
                    ReplayDecoder("eagle2", [e.__class__(**{**e.__dict__, "method": "eagle2"})
                                             for e in baseline_events("abc")]))
    assert ok.run("hi", 8)["baseline_text"] == "abc"


def test_prompt_limited_by_model_context():
    tok, baseline, eagle = tiny_stack()
    baseline.target.max_positions = 40
    pg = Playground(tok, baseline, eagle)
    with pytest.raises(gr.Error, match="at most"):
        pg.run("the fox " * 12, 16)
    assert pg.run("the fox", 8)["identical"] is True


# ------------------------------------------------------------------------------------------ logging, loading

def test_one_json_log_line_per_request_without_prompt(caplog):
    tok, baseline, eagle = tiny_stack()
    pg = Playground(tok, baseline, eagle)
    secret = "my secret prompt text"
    with caplog.at_level(logging.INFO, logger="eagle_playground.requests"):
        pg.run(secret, 6)
    lines = [r.getMessage() for r in caplog.records if r.name == "eagle_playground.requests"]
    assert len(lines) == 1 and secret not in lines[0] and "secret" not in caplog.text
    rec = json.loads(lines[0])
    assert rec["outcome"] == "ok" and rec["model"] == "tiny-llama" and rec["methods"] == ["baseline", "eagle"]
    assert rec["prompt_tokens"] > 0 and rec["eagle_new_tokens"] == rec["baseline_new_tokens"] == 6
    assert rec["seconds"] > 0 and math.isfinite(rec["eagle_tau"]) and rec["eagle_tau"] >= 1


def test_app_flags_and_safe_defaults():
    import importlib.util

    spec = importlib.util.spec_from_file_location("app_main", STATIC.parent / "app.py")
    app_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app_py)

    a = app_py.parse_args([])
    assert a.trust_remote_code is False and a.log_level == "INFO"
    assert a.max_new_tokens_cap == 1024 and a.max_prompt_tokens == 4096
    a = app_py.parse_args(["--log-level", "debug", "--trust-remote-code", "--max-new-tokens-cap", "32",
                           "--max-prompt-tokens", "100"])
    assert (a.log_level, a.trust_remote_code, a.max_new_tokens_cap, a.max_prompt_tokens) == ("DEBUG", True, 32, 100)
    with pytest.raises(SystemExit):
        app_py.parse_args(["--log-level", "chatty"])
    with pytest.raises(SystemExit):
        app_py.parse_args(["--max-new-tokens-cap", "0"])
    assert a.prompt_mode == "auto" and app_py.parse_args(["--prompt-mode", "raw"]).prompt_mode == "raw"
    with pytest.raises(SystemExit):
        app_py.parse_args(["--prompt-mode", "jinja"])
    from core.generate import parse_args as gen_args

    assert gen_args(["--prompt", "x"]).trust_remote_code is False
    opts = launch_options()
    assert opts["allowed_paths"] == [str(STATIC)]


def test_trust_remote_code_off_unless_asked(monkeypatch):
    from core import pipeline

    seen = []

    def fake_load(name=None, device=None, dtype=None, trust_remote_code=False):
        seen.append(trust_remote_code)
        raise ValueError("stop here")

    monkeypatch.setattr(pipeline, "load_target", fake_load)
    for kw in ({}, {"trust_remote_code": True}):
        with pytest.raises(ValueError):
            pipeline.build_decoders("org/model", **kw)
    assert seen == [False, True]


def test_api_takes_no_file_paths(server):
    api = server.view_api(print_info=False, return_format="dict")
    params = [p["parameter_name"] for p in api["named_endpoints"]["/run"]["parameters"]]
    assert params == ["prompt", "max_new_tokens", "temperature", "top_p", "seed", "total_tokens", "depth", "top_k",
                      "lookup"]
    assert not any("path" in p or "head" in p or "model" in p for p in params)


def test_head_loading_is_safe():
    src = (Path(__file__).resolve().parent.parent / "core" / "draft_head.py").read_text()
    assert "weights_only=True" in src and "model.safetensors" in src


def test_app_start_failure_is_one_line():
    """A model that cannot be resolved stops `python app.py` before loading anything: one line, non-zero exit."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "app.py", "--model", "no-such-model"], cwd=STATIC.parent,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    err = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("[eagle-playground] error: unknown model 'no-such-model'")
