"""The training pool: prompts and text read from JSON Lines, prompts wrapped in the chat template, and the plan
that groups the rows into generation and prefill batches.

Two sources, mixed by --prefill-share and --n-text: on-policy (the target continues a prompt; the features are the
ones its own generation computed, core/train/generation.py) and prefill-only (one teacher-forced forward over
existing text, a prompt's own text, or an earlier run's sequences; no generation, so volume is cheap but
off-policy). core/train/shards.py writes what the plan's batches produce.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

EVAL_FILES = ("spec_bench_questions.jsonl", "mt_bench_questions.jsonl")


def read_pool(prompts: str | None, text: str | None, n_prompts: int, n_text: int, seed: int,
              min_prompt_chars: int = 0, sources: tuple[str, ...] = ()) -> list[dict]:
    """Rows {kind: 'prompt'|'text', id, body}, shuffled with a fixed seed. Evaluation files are refused.

    `min_prompt_chars` keeps only prompts at least that long (a second round of long-context data: passages and
    documents followed by their instruction, which a short --max-prompt cuts off). `sources` keeps only prompts whose
    `source` field is one of them (a round aimed at one kind of request, e.g. chat turns); a name no row carries is
    an error, so a typo cannot silently empty the pool.
    """
    rows: list[dict] = []
    for path, kind, key, n in ((prompts, "prompt", "prompt", n_prompts), (text, "text", "text", n_text)):
        if not path or n <= 0:
            continue
        if Path(path).name in EVAL_FILES:
            raise ValueError(f"{path} is an evaluation set; it must not be used for training")
        items = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
        if kind == "prompt" and min_prompt_chars:
            items = [it for it in items if len(it[key]) >= min_prompt_chars]
        if kind == "prompt" and sources:
            present = {it.get("source") for it in items}
            if missing := sorted(set(sources) - present):
                raise ValueError(f"{path} has no prompts from {', '.join(missing)}; "
                                 f"its sources: {', '.join(sorted(str(x) for x in present))}")
            items = [it for it in items if it.get("source") in sources]
        random.Random(seed).shuffle(items)
        rows += [{"kind": kind, "id": it.get("id", str(i)), "body": it[key]} for i, it in enumerate(items[:n])]
    random.Random(seed + 1).shuffle(rows)
    return rows


def user_turn(tok, text: str) -> str:
    """`text` as one user turn in the tokenizer's chat template with the assistant's turn opened, as text: the one
    wrap of a pool prompt, used by core.train --chat (`chat_prompt`, the pool rows), `template_tail` and
    core.train.followups (which matches stored first turns by it)."""
    return tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)


def chat_prompt(tok, text: str, max_prompt: int) -> list[int]:
    """One user turn in the chat template, assistant turn opened, at most `max_prompt` tokens: a long text is cut
    inside the user's words, so the template's tail (`<|im_start|>assistant\n` for Qwen) always survives (cutting
    the wrapped ids instead can drop that tail, and the target then continues the user's text instead of answering
    it)."""
    ids = tok(user_turn(tok, text), add_special_tokens=True).input_ids
    if len(ids) <= max_prompt:
        return ids
    words = tok(text, add_special_tokens=False).input_ids
    keep = max(0, len(words) - (len(ids) - max_prompt))
    while True:  # re-tokenising a cut text can merge differently: shorten until it fits
        ids = tok(user_turn(tok, tok.decode(words[:keep])), add_special_tokens=True).input_ids
        if len(ids) <= max_prompt or keep == 0:
            return ids[-max_prompt:] if len(ids) > max_prompt else ids
        keep = max(0, keep - max(1, len(ids) - max_prompt))


def template_tail(tok) -> list[int]:
    """The ids the chat template puts after a user's text to open the assistant's turn (empty without a
    template): what every on-policy training prompt must end with."""
    if not getattr(tok, "chat_template", None):
        return []
    a = user_turn(tok, "x")
    b = tok.apply_chat_template([{"role": "user", "content": "x"}], add_generation_prompt=False, tokenize=False)
    return tok(a[len(b):] if a.startswith(b) else "", add_special_tokens=False).input_ids


def plan_batches(rows: list[dict], tok, batch: int, max_prompt: int, max_text: int, prefill_share: float,
                 seed: int, exclude: set[tuple[int, ...]] | None = None) -> list[dict]:
    """Group rows into batches of one kind and similar length.

    Each batch is {"kind": "generate"|"prefill", "enc": [ids...], "sample": bool, "seed": int}. Prompts are
    continued by the target (on-policy) unless drawn into the prefill share (the prompt's own text, teacher-forced);
    text rows and `ids` rows (sequences of an earlier run, --reprefill) are always prefilled. Rows are sorted by
    token length before batching, so a batch holds similar lengths and its padded prefill chunks pad little.
    Prompts whose encoding is in `exclude` (`stored_prompts` of earlier rounds) are left out.
    """
    rng = random.Random(seed)
    gen_rows, pre_rows = [], []
    for r in rows:
        if r["kind"] == "prompt":  # `enc`: already encoded within max_prompt (chat_prompt)
            e = r["enc"] if "enc" in r else tok(r["body"], add_special_tokens=True).input_ids[:max_prompt]
            if exclude and tuple(e) in exclude:
                continue
            (pre_rows if rng.random() < prefill_share else gen_rows).append(e)
        elif r["kind"] == "ids":  # an earlier run's sequence (prompt + the target's continuation)
            pre_rows.append(list(r["ids"]))
        else:
            pre_rows.append(tok(r["body"], add_special_tokens=True).input_ids[:max_text])
    plan = []
    for kind, encs in (("generate", gen_rows), ("prefill", pre_rows)):
        encs = sorted((e for e in encs if len(e) >= 2), key=len)
        for i in range(0, len(encs), batch):
            plan.append({"kind": kind, "enc": encs[i : i + batch]})
    rng.shuffle(plan)  # a run cut short still holds a mix of lengths and kinds
    return plan
