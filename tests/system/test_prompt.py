"""The prompt boundary (core/prompt.py): one encoding for raw and chat prompts, one fit rule, one error type; the
app, generate, the bench and training's evaluation all go through it."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.engine.config import DecodeConfig, TreeConfig
from core.prompt import PromptError, check_prompt_fits, encode, encode_prompt, prompt_limit, prompt_mode
from test_generate_cli import word_tokenizer

ROOT = Path(__file__).resolve().parents[2]
CHAT = "{% for m in messages %}<s> {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}w9{% endif %}"


def test_raw_prompts_are_the_tokenizers_own_ids():
    tok = word_tokenizer()
    assert encode(tok, "w3 w4") == tok("w3 w4").input_ids == [1, 3, 4]
    assert encode_prompt(tok, "w3 w4") == [1, 3, 4] and prompt_mode(tok) == "raw"
    for bad in ("", "   ", None):
        with pytest.raises(PromptError, match="prompt is empty"):
            encode_prompt(tok, bad)
    with pytest.raises(PromptError, match="chat mode needs a tokenizer with a chat_template"):
        encode_prompt(tok, "w3", "chat")
    with pytest.raises(PromptError, match="unknown prompt mode"):
        prompt_mode(tok, "jinja")
    assert issubclass(PromptError, ValueError)  # every CLI already turns a ValueError into its one line


def test_chat_prompts_are_one_user_turn_of_the_template():
    tok = word_tokenizer()
    tok.chat_template = CHAT
    assert prompt_mode(tok) == "chat" and prompt_mode(tok, "raw") == "raw"
    assert encode_prompt(tok, "w5") == encode_prompt(tok, "w5", "chat")
    assert encode_prompt(tok, "w5", system="w7")[:4] != encode_prompt(tok, "w5")[:4]  # the system turn comes first
    assert encode_prompt(tok, "w5", "raw") == [1, 5]


def test_one_fit_rule():
    cfg = DecodeConfig(max_new_tokens=100, tree=TreeConfig(16, 6, 8, lookup=0))
    assert prompt_limit(1000, cfg) == 1000 - 100 - cfg.tree.reach - 1
    assert prompt_limit(1000, cfg, cap=50) == 50 and prompt_limit(None, cfg, cap=50) == 50
    assert prompt_limit(100, cfg) < 0  # nothing fits: every prompt is refused

    class Target:
        max_positions = 1000

    check_prompt_fits(Target(), [1] * prompt_limit(1000, cfg), cfg)
    with pytest.raises(PromptError, match=r"prompt is 1000 tokens; at most \d+ fit in the model's context of 1000"):
        check_prompt_fits(Target(), [1] * 1000, cfg)


def test_nothing_else_encodes_a_prompt():
    """apply_chat_template with tokens out, and the fit arithmetic, live in core/prompt.py only (training's data
    generation renders chat rows as text, which it then encodes with its sequences)."""
    found = []
    for p in [*ROOT.glob("core/**/*.py"), *ROOT.glob("app/**/*.py")]:
        if p.name == "prompt.py" and p.parent.name == "core":
            continue
        src = p.read_text()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "apply_chat_template":
                if not any(k.arg == "tokenize" and getattr(k.value, "value", True) is False for k in node.keywords):
                    found.append(str(p.relative_to(ROOT)))
        if "max_positions - " in src:
            found.append(f"{p.relative_to(ROOT)}: fit arithmetic")
    assert found == []
