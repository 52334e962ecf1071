"""Benchmark questions: Spec-Bench / MT-bench jsonl rows read, checked and selected per category (pure, no model).

Spec-Bench's thirteen categories collapse into its six groups (core.train.evaluate.spec_bench_category) unless the
file's own categories are kept (--file-categories, e.g. MT-bench's eight).
"""
from __future__ import annotations

import json

from core.splits import in_dev_split
from core.train.evaluate import spec_bench_category


SPLITS = ("all", "dev", "test")


class BenchError(ValueError):
    """A user error of the bench: a ValueError, so core/cli.py's runner reports it as one line, exit status 2."""


def read_questions(path: str) -> list[dict]:
    """Rows of a Spec-Bench jsonl; each needs question_id, category and a non-empty turns list."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                ok = isinstance(r["turns"], list) and r["turns"] and "question_id" in r and "category" in r
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise BenchError(f"{path}:{n}: not a question row ({e})") from None
            if not ok:
                raise BenchError(f"{path}:{n}: needs question_id, category and a non-empty turns list")
            rows.append(r)
    return rows


def select_questions(rows: list[dict], categories: frozenset[str] = frozenset(), per_category: int = 0,
                     limit: int = 0, file_categories: bool = False) -> list[dict]:
    """Filter by category (Spec-Bench's six or a raw name), take the first N per category in file order, then cap.
    Groups are Spec-Bench's six (MT-bench's eight collapse into mt_bench) unless file_categories keeps the file's."""
    known = {spec_bench_category(r["category"]) for r in rows} | {r["category"] for r in rows}
    if categories - known:
        raise BenchError(f"unknown categories {sorted(categories - known)}; the file has {sorted(known)}")
    seen: dict[str, int] = {}
    out = []
    for r in rows:
        group = r["category"] if file_categories else spec_bench_category(r["category"])
        if categories and group not in categories and r["category"] not in categories:
            continue
        if per_category and seen.get(group, 0) >= per_category:
            continue
        seen[group] = seen.get(group, 0) + 1
        out.append({**r, "group": group})
    return out[:limit] if limit else out




def split_questions(rows: list[dict], split: str) -> list[dict]:
    """The rows of one split, fixed by question_id alone so it never depends on the selection or file order: "dev"
    (core/splits.py: question_id % DEV_EVERY == 0) is for training decisions (which head, which tree, which data); "test" (every
    other row) is what published results use, so no published number comes from a prompt a decision was tuned on;
    "all" keeps every row (the runs recorded before the split existed)."""
    if split not in SPLITS:
        raise BenchError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    if split == "all":
        return list(rows)
    dev = split == "dev"
    return [r for r in rows if in_dev_split(r["question_id"]) == dev]
