"""Hardening of the command lines: bad input to the generate / bench / train CLIs gets one line on stderr and a
non-zero exit before any decoding, and odd unicode prompts work; the table of bad inputs (these and the app's,
tests/app/test_hardening_app.py) stays large."""
from __future__ import annotations

import json

import pytest
from test_hardening_app import API_BAD, ENDPOINTS, generation_spy


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    """A head for a target of another width (mismatch) and a question file for core.bench."""
    from conftest import tiny_target

    from core.drafters.draft_head import HeadConfig, init_head, save_head

    root = tmp_path_factory.mktemp("hard")
    save_head(init_head(HeadConfig.for_target(128, 128)), root / "wide_head")
    (root / "q.jsonl").write_text(json.dumps({"question_id": 1, "category": "writing", "turns": ["Hi"]}) + "\n")
    return root, tiny_target


@pytest.fixture
def tiny_loader(monkeypatch, tiny_folders):
    """core.pipeline loads the tiny Llama + a word tokenizer instead of a real model (the head path stays real)."""
    from test_generate_cli import word_tokenizer

    from core import pipeline
    from core.models.target import resolve_model

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
    ("generate", gen_argv("--tree", "16,0,10"), "depth must be between"),
    ("generate", gen_argv("--tree", "16,6,999"), "top_k must be between"),
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
    ("generate", gen_argv("--temperature", "1e-40"), "temperature must be 0 (greedy) or at least 0.001"),
    ("generate", gen_argv("--temperature", "1e-37"), "temperature must be 0 (greedy) or at least 0.001"),
    ("generate", gen_argv("--tree", "100000,6,10"), "total_tokens must be between"),
    ("generate", gen_argv("--tree", "16,6,10,1000"), "lookup must be between"),
    ("bench", ["--questions", "{root}/q.jsonl", "--max-new-tokens", "4", "--temperature", "1e-38", "--json", "x"],
     "temperature must be 0 (greedy) or at least 0.001"),
    ("bench", ["--questions", "{root}/q.jsonl", "--max-new-tokens", "4", "--tree", "9999,99,99", "--json", "x"],
     "total_tokens must be between"),
    ("train", ["--out", "{root}/t", "--epochs", "0"], "--epochs must be a positive finite number"),
    ("train", ["--out", "{root}/t", "--max-len", "0"], "--max-len must be >= 1"),
]


def cli_main(which: str):
    if which == "generate":
        from core.generate import main
    elif which == "bench":
        from core.bench.cli import main
    else:
        from core.train.__main__ import main
    return main


def test_bad_input_table_is_large_enough():
    assert len(API_BAD) * len(ENDPOINTS) + len(CLI_BAD) >= 40


@pytest.mark.parametrize("which,argv,pattern", CLI_BAD, ids=[f"{c[0]}{i}" for i, c in enumerate(CLI_BAD)])
def test_cli_bad_input_one_line_nonzero_exit(tiny_loader, tiny_folders, capsys, monkeypatch, which, argv, pattern):
    root, _ = tiny_folders
    argv = [a.replace("{root}", str(root)) for a in argv]
    decoded = generation_spy(monkeypatch)
    try:
        rc = cli_main(which)(argv)
    except SystemExit as e:  # argparse errors
        rc = e.code
    assert decoded == []  # refused before any decoding
    err = capsys.readouterr().err.strip()
    assert rc not in (0, None), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert pattern in err, err


def test_cli_odd_unicode_prompt_works(tiny_loader, capsys):
    from core.generate import main

    for prompt in ["<bos><eos> w3", "w3 \u0000 w4", "שלום w5 🦅"]:
        assert main(["--prompt", prompt, "--max-new-tokens", "3", "--json"]) == 0
        assert len(json.loads(capsys.readouterr().out)["token_ids"]) == 3
