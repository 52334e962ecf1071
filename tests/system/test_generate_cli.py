"""`python -m core.generate` on a tiny random Llama saved to a temporary folder with a word-level tokenizer.

Subprocess runs check the real entry point (JSON, exit codes, one-line errors without traceback); the remaining
error cases call main() in-process to keep the suite fast.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from conftest import tiny_model
from core.drafters.draft_head import HeadConfig, init_head, save_head
from core.generate import main

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "w3 w17 w42 w5 w9 w11 w23 w31 w7 w60 w8 w19"
N_NEW = 40


def word_tokenizer() -> PreTrainedTokenizerFast:
    """Offline tokenizer: 'w3' .. 'w127' are ids 3..127; <s> (BOS, prepended) is 1."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, 128)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli")
    tiny_model("llama").save_pretrained(root / "model")
    word_tokenizer().save_pretrained(root / "model")
    save_head(init_head(HeadConfig.for_target(64, 128), seed=2), root / "head", dtype=torch.float32)
    save_head(init_head(HeadConfig.for_target(32, 128)), root / "head_other_target")
    (root / "head_bad_json").mkdir()
    (root / "head_bad_json" / "config.json").write_text("{not json")
    save_head(init_head(HeadConfig.for_target(64, 128)), root / "head_corrupt")
    (root / "head_corrupt" / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    (root / "not_a_model").mkdir()
    return {p.name: p for p in root.iterdir()}


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "core.generate", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def base_args(folders, method: str, *extra: str) -> list[str]:
    return ["--model", str(folders["model"]), "--prompt", PROMPT, "--method", method, "--max-new-tokens", str(N_NEW),
            "--dtype", "fp32", "--device", "cpu", *extra]


def test_cli_json_baseline_and_eagle2_agree(folders):
    runs = {}
    for method, extra in [("baseline", ()), ("eagle2", ("--tree", "10,3,3"))]:
        proc = cli(*base_args(folders, method, *extra, "--json"))
        assert proc.returncode == 0, proc.stderr
        runs[method] = json.loads(proc.stdout)
    b, e = runs["baseline"], runs["eagle2"]
    for r in (b, e):
        assert {"method", "token_ids", "text", "stats"} <= set(r)
        assert {"new_tokens", "seconds", "tokens_per_s", "tau", "target_forwards", "accept_rate", "accept_hist",
                "draft_forwards", "note"} <= set(r["stats"])
        assert r["stats"]["new_tokens"] == len(r["token_ids"]) == N_NEW
        assert r["text"] == word_tokenizer().decode(r["token_ids"], skip_special_tokens=True)
        assert r["prompt_tokens"] == 13  # BOS + 12 words
        assert r["prompt_mode"] == "raw"  # auto: the word tokenizer has no chat template
    assert (b["method"], e["method"]) == ("baseline", "eagle2")
    assert e["token_ids"] == b["token_ids"]
    assert b["stats"]["tau"] == 1.0 and b["stats"]["target_forwards"] == N_NEW
    assert "untrained" in e["stats"]["note"] and "untrained" in e["head"] and b["head"] is None
    # the CLI's ids are the model's greedy continuation
    ids = word_tokenizer()(PROMPT).input_ids
    with torch.no_grad():
        logits = tiny_model("llama")(torch.tensor([ids + b["token_ids"]])).logits[0]
    assert logits[len(ids) - 1 : -1].argmax(-1).tolist() == b["token_ids"]


def test_cli_text_output_with_a_head_folder(folders, capsys):
    rc = main(base_args(folders, "eagle2", "--head", str(folders["head"]), "--tree", "6,2,10"))
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    assert out[-1].startswith("[eagle2] 40 tokens in ") and "tau" in out[-1] and "note" not in out[-1]
    assert str(folders["head"]) in out[-1]
    assert out[0].split() and all(w.startswith("w") for w in out[0].split())  # the text line, special tokens dropped


def test_cli_sampling_is_seeded(folders, capsys):
    def sample(seed: str) -> list[int]:
        assert main(base_args(folders, "eagle2", "--temperature", "0.8", "--top-p", "0.9", "--seed", seed,
                              "--tree", "6,2,10", "--json")) == 0
        return json.loads(capsys.readouterr().out)["token_ids"]

    assert sample("3") == sample("3")


def test_cli_errors_are_one_line_without_traceback(folders):
    for args in (["--prompt", "", "--method", "baseline"],
                 base_args(folders, "eagle2", "--head", str(folders["head_corrupt"]))):
        proc = cli(*args)
        assert proc.returncode != 0
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("case", [
    "empty_prompt", "negative_tokens", "zero_tokens", "hot_temperature", "negative_temperature", "top_p",
    "tree_budget", "tree_syntax", "unknown_model_path", "folder_without_model", "missing_head", "head_bad_json", "head_corrupt",
    "head_other_target", "bad_dtype", "bad_method", "not_a_number",
])
def test_cli_bad_arguments(folders, case, capsys):
    m = str(folders["model"])
    args = {
        "empty_prompt": ["--prompt", "   ", "--model", m],
        "negative_tokens": ["--prompt", "w3", "--max-new-tokens", "-5"],
        "zero_tokens": ["--prompt", "w3", "--max-new-tokens", "0"],
        "hot_temperature": ["--prompt", "w3", "--temperature", "11"],
        "negative_temperature": ["--prompt", "w3", "--temperature", "-0.5"],
        "top_p": ["--prompt", "w3", "--top-p", "0"],
        "tree_budget": ["--prompt", "w3", "--tree", "0,6,10"],
        "tree_syntax": ["--prompt", "w3", "--tree", "24,6"],
        "unknown_model_path": ["--prompt", "w3", "--model", "/nonexistent/model/folder"],
        "folder_without_model": ["--prompt", "w3", "--model", str(folders["not_a_model"]), "--dtype", "fp32"],
        "missing_head": ["--prompt", "w3", "--model", m, "--head", str(folders["model"] / "nope")],
        "head_bad_json": ["--prompt", "w3", "--model", m, "--head", str(folders["head_bad_json"]), "--dtype", "fp32"],
        "head_corrupt": ["--prompt", "w3", "--model", m, "--head", str(folders["head_corrupt"]), "--dtype", "fp32"],
        "head_other_target": ["--prompt", "w3", "--model", m, "--head", str(folders["head_other_target"]),
                              "--dtype", "fp32"],
        "bad_dtype": ["--prompt", "w3", "--model", m, "--dtype", "fp8"],
        "bad_method": ["--prompt", "w3", "--method", "medusa"],
        "not_a_number": ["--prompt", "w3", "--max-new-tokens", "many"],
    }[case]
    try:
        rc = main(args)
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc not in (0, None)
    assert len(err) == 1 and err[0].startswith("error: "), err


def test_cli_chat_mode_wraps_the_prompt_as_a_user_turn(folders, capsys, tmp_path):
    """A tokenizer with a chat template gets the prompt as one user turn under auto (as the app does); raw skips it;
    chat without a template is one line and status 2."""
    model = tmp_path / "chat_model"
    tiny_model("llama").save_pretrained(model)
    tok = word_tokenizer()
    tok.chat_template = "{% for m in messages %}w100 {{ m['content'] }} w101 {% endfor %}w102"
    tok.save_pretrained(model)
    args = ["--model", str(model), "--prompt", PROMPT, "--method", "baseline", "--max-new-tokens", "4",
            "--dtype", "fp32", "--device", "cpu", "--json"]
    assert main(args) == 0
    auto = json.loads(capsys.readouterr().out)
    assert auto["prompt_mode"] == "chat", auto
    assert auto["prompt_tokens"] == 12 + 3, auto  # w100, the 12 words, w101 w102 (the template adds no BOS)
    assert main(args + ["--prompt-mode", "raw"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert raw["prompt_mode"] == "raw" and raw["prompt_tokens"] == 13
    assert main(base_args(folders, "baseline", "--prompt-mode", "chat")) == 2
    assert "chat_template" in capsys.readouterr().err
