"""Long-context prompts from the training text: a passage followed or preceded by an instruction about it.

Summaries and answers grounded in a document are where the head is weakest after translation: the target's text
there repeats and rephrases the context, and the training prompts hold few long documents (about 800 of 14,308 are
over 1,500 characters). text.jsonl holds 1,338 passages of that length that the head has only seen teacher-forced
as plain text. This module cuts a window of whole paragraphs out of each passage and wraps it in one of a few
instructions (summarise, list the main points, say what it is about), so that the main data stage (`python -m
core.train --prompts <this file>`) lets the target answer them on-policy, which is what the head meets at inference.
No model runs here; it is a pure text transform.

    python -m core.train.documents --out runs/doc-sources/prompts.jsonl --n 768 --seed 9
"""
from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from core.cli import Parser, fail
from core.train.sources import pick_template, write_once

# (template, weight): the instruction before or after the document, the ways users ask about one
TEMPLATES = (("Summarize: {doc}", 0.3),
             ("{doc}\n\nSummarize the text above in a few sentences.", 0.2),
             ("Read the following passage and list its main points.\n\n{doc}", 0.15),
             ("{doc}\n\nWhat is the passage above mainly about? Answer in a short paragraph.", 0.15),
             ("Passage:\n{doc}\n\nQuestion: Who is speaking in this passage, and what do they want?\nAnswer:", 0.2))


def passage_window(text: str, rng: random.Random, min_chars: int = 600, max_chars: int = 2500) -> str | None:
    """Whole lines of `text` from a random starting line, up to `max_chars`; None when under `min_chars`.

    A line longer than `max_chars` on its own is cut at its last sentence end before the limit.
    """
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    if not lines:
        return None
    tail = [sum(len(ln) + 1 for ln in lines[i:]) for i in range(len(lines))]  # chars from line i to the end
    starts = [i for i in range(len(lines)) if tail[i] >= min_chars] or [0]
    out: list[str] = []
    size = 0
    for ln in lines[rng.choice(starts):]:
        if size + len(ln) > max_chars:
            if not out:  # one long line: keep its sentences that fit
                ends = [m.end() for m in re.finditer(r"[.!?](?=\s|$)", ln[:max_chars])]
                out.append(ln[: ends[-1]] if ends else ln[:max_chars])
            break
        out.append(ln)
        size += len(ln) + 1
    doc = "\n".join(out)
    return doc if len(doc) >= min_chars else None


def document_prompt(doc: str, rng: random.Random) -> str:
    """One of TEMPLATES (by weight) around the document."""
    return pick_template(TEMPLATES, rng).format(doc=doc)


def write_documents(text_path: str, n: int, out: Path, seed: int = 0, min_chars: int = 600,
                    max_chars: int = 2500) -> dict:
    """Write `n` prompt rows (jsonl: id, source, prompt) built from the passages of `text_path`, each passage used
    once before any is used twice (with another window and instruction). Returns counts."""
    from core.train.data import read_pool  # refuses evaluation files

    rows = read_pool(None, text_path, 0, 10**9, seed)
    if not rows:
        raise ValueError(f"{text_path}: no text rows")
    rng = random.Random(seed)
    prompts, tried = [], 0
    while len(prompts) < n and tried < 4 * n + len(rows):
        r = rows[tried % len(rows)]
        tried += 1
        doc = passage_window(r["body"], rng, min_chars, max_chars)
        if doc:
            prompts.append({"id": f"document:{seed}:{len(prompts)}:{r['id']}", "source": "document instruction",
                            "prompt": document_prompt(doc, rng)})
    if len(prompts) < n:
        raise ValueError(f"only {len(prompts)} of {n} passages reach {min_chars} characters")
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in prompts), encoding="utf-8")
    tmp.rename(out)
    return {"prompts": len(prompts), "passages": len(rows),
            "mean_chars": round(sum(len(p["prompt"]) for p in prompts) / len(prompts))}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from core.train.__main__ import DATA

    p = Parser(prog="python -m core.train.documents", description=__doc__.split("\n\n")[0])
    p.add_argument("--text", default=str(DATA / "train" / "text.jsonl"), help="jsonl rows with a 'text' field")
    p.add_argument("--out", required=True, help="prompts file to write (jsonl rows with a 'prompt' field)")
    p.add_argument("--n", type=int, default=768, help="prompts to write")
    p.add_argument("--min-chars", type=int, default=600)
    p.add_argument("--max-chars", type=int, default=2500)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.n <= 0 or not 0 < a.min_chars <= a.max_chars:
        return fail("", f"need --n > 0 and 0 < --min-chars <= --max-chars, got {a.n}, {a.min_chars}, {a.max_chars}")
    out = Path(a.out)
    return write_once(out, lambda: write_documents(a.text, a.n, out, a.seed, a.min_chars, a.max_chars),
                      (OSError, ValueError))


if __name__ == "__main__":
    raise SystemExit(main())
