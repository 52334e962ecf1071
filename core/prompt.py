"""The prompt boundary: text becomes token ids here and nowhere else (the app, generate, the bench, training's
evaluation and interop all call it).

A prompt is encoded raw (base models: the text as is, special tokens such as BOS added as the tokenizer does) or
as one user turn of the tokenizer's chat template (after an optional system turn), `auto` choosing chat when the
tokenizer has a template. Whether it fits is one rule (`prompt_limit`): the model's context minus the new tokens,
minus the deepest tree node (draft depth or lookup chain), minus one, and at most a caller's cap. Every refusal is
a `PromptError` (a ValueError) with one line.
"""
from __future__ import annotations

PROMPT_MODES = ("auto", "raw", "chat")


class PromptError(ValueError):
    """A prompt that cannot be used: empty, no tokens, too long, or chat mode without a template (one line)."""


def prompt_mode(tokenizer, mode: str = "auto") -> str:
    """The mode encode_prompt will actually use: 'chat' when asked (or 'auto' and the tokenizer has a chat template),
    else 'raw'. For a UI indicator."""
    if mode not in PROMPT_MODES:
        raise PromptError(f"unknown prompt mode {mode!r}; choose one of {', '.join(PROMPT_MODES)}")
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if mode == "chat" and not has_template:
        raise PromptError("chat mode needs a tokenizer with a chat_template; use raw mode for this model")
    return "chat" if mode == "chat" or (mode == "auto" and has_template) else "raw"


def encode(tokenizer, text: str) -> list[int]:
    """Prompt text -> ids as is (special tokens such as BOS added as the tokenizer does); refuses empty prompts."""
    if not isinstance(text, str) or not text.strip():
        raise PromptError("prompt is empty")
    ids = tokenizer.encode(text)
    if not ids:
        raise PromptError("prompt encodes to no tokens")
    return list(ids)


def encode_prompt(tokenizer, text: str, mode: str = "auto", system: str | None = None) -> list[int]:
    """Prompt text -> ids. 'chat' (default for tokenizers with a chat_template) wraps the text as one user turn (after
    an optional system turn) and opens the assistant turn; 'raw' (base models) encodes the text as is."""
    if prompt_mode(tokenizer, mode) == "raw":
        return encode(tokenizer, text)
    if not isinstance(text, str) or not text.strip():
        raise PromptError("prompt is empty")
    msgs = ([{"role": "system", "content": system}] if system and system.strip() else []) + [
        {"role": "user", "content": text}]
    return _template_ids(tokenizer, msgs, "prompt")


def encode_messages(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """A checked history -> prompt ids: the chat template applied with the assistant turn opened. ValueError when the
    tokenizer has no chat template (a base model continues text; it has no turns to keep)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("a conversation needs a chat model (a tokenizer with a chat_template); this model takes "
                         "raw text")
    return _template_ids(tokenizer, messages, "conversation")


def _template_ids(tokenizer, messages: list[dict[str, str]], what: str) -> list[int]:
    """Messages -> ids through the chat template, the assistant turn opened; PromptError when nothing is left."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in newer transformers
        ids = ids["input_ids"]
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    if not ids:
        raise PromptError(f"{what} encodes to no tokens")
    return [int(i) for i in ids]


def prompt_limit(max_positions: int | None, cfg, cap: int | None = None) -> int:
    """The most prompt tokens that fit: the context (`max_positions`; None = unknown) less `cfg.max_new_tokens`, the
    tree's reach and one, and at most `cap`."""
    limit = cap if cap is not None else float("inf")
    if max_positions:
        limit = min(limit, max_positions - cfg.max_new_tokens - cfg.tree.reach - 1)
    return int(limit) if limit != float("inf") else 2**62


def check_prompt_fits(target, prompt_ids: list[int], cfg) -> None:
    """The prompt plus max_new_tokens (plus the deepest tree node: draft depth or lookup chain) must fit the context."""
    limit = prompt_limit(target.max_positions, cfg)
    if len(prompt_ids) > limit:
        raise PromptError(f"prompt is {len(prompt_ids)} tokens; at most {max(limit, 0)} fit in the model's context "
                          f"of {target.max_positions} with --max-new-tokens {cfg.max_new_tokens}")


def decode(tokenizer, ids: list[int]) -> str:
    """Generated ids -> text, special tokens dropped."""
    return tokenizer.decode(ids, skip_special_tokens=True)
