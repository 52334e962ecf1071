"""Spec-Bench's per-method answer files from a bench run, so Spec-Bench's own scripts read our runs.

Spec-Bench (github.com/hemingkx/Spec-Bench) writes one JSONL file per method, one line per question
(evaluation/eval.py):

    {"question_id", "category", "answer_id", "model_id", "tstamp",
     "choices": [{"index": 0, "turns": [answer text per turn], "decoding_steps": [target forwards per turn],
                  "new_tokens": [per turn], "wall_time": [seconds per turn],
                  "accept_lengths": [tokens per target forward, every step of every turn, in order]}]}

evaluation/speed.py reads choices[0]: sum(new_tokens) / sum(wall_time) per question (the baseline file's tokens it
recounts from the text), and extends one list with every file's accept_lengths for "#Mean accepted tokens";
evaluation/equal.py compares str(choices[0]["turns"]) line by line between two files. A plain decoder's
accept_lengths are all 1 (Spec-Bench's inference_baseline.py: `[1] * new_token`). The file is named as Spec-Bench
names its runs: <model>-<method>-<dtype>-temp-<T>.jsonl, which is also the model_id.

Methods whose per-step lengths are not observable (transformers' prompt lookup, `hf-pld`) are not written; the
caller says so. Pure apart from the file writing.
"""
from __future__ import annotations

import json
import time
from pathlib import Path


def model_id(model: str, method: str, dtype: str, temperature: float) -> str:
    """Spec-Bench's run name, e.g. qwen2.5-coder-0.5b-instruct-eagle2-bfloat16-temp-0.0."""
    return f"{Path(model).name}-{method}-{dtype}-temp-{float(temperature)}"


def records(questions: list[dict], rows: list[dict], tokenizer, method: str, mid: str) -> list[dict] | None:
    """One Spec-Bench line per question for `method` (its rows of every turn, in turn order), or None when a row has
    no per-step lengths (`accept_lengths`)."""
    mine = [r for r in rows if r["method"] == method]
    if not mine or any(r.get("accept_lengths") is None for r in mine):
        return None
    category = {q["question_id"]: q["category"] for q in questions}  # the file's own category (speed.py filters it)
    by_q: dict[int, list[dict]] = {}
    for r in mine:
        by_q.setdefault(r["question_id"], []).append(r)
    out = []
    for qid, turns in by_q.items():
        turns = sorted(turns, key=lambda r: r.get("turn", 1))
        choice = {"index": 0,
                  "turns": [tokenizer.decode(r["token_ids"], skip_special_tokens=True).strip() for r in turns],
                  "decoding_steps": [r["target_forwards"] for r in turns],
                  "new_tokens": [r["new_tokens"] for r in turns],
                  "wall_time": [r["seconds"] for r in turns],
                  "accept_lengths": [n for r in turns for n in r["accept_lengths"]]}
        out.append({"question_id": qid, "category": category.get(qid, turns[0]["category"]),
                    "answer_id": f"{mid}-{qid}", "model_id": mid, "choices": [choice], "tstamp": time.time()})
    return out


def write_specbench(folder: str | Path, questions: list[dict], rows: list[dict], tokenizer, model: str, dtype: str,
                    temperature: float) -> tuple[list[Path], list[str]]:
    """Write <folder>/<model_id>.jsonl per method; returns (files written, methods left out for lack of per-step
    lengths)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    for method in dict.fromkeys(r["method"] for r in rows):
        mid = model_id(model, method, dtype, temperature)
        lines = records(questions, rows, tokenizer, method, mid)
        if lines is None:
            skipped.append(method)
            continue
        path = folder / f"{mid}.jsonl"
        path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
        written.append(path)
    return written, skipped
