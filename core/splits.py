"""The dev / test split of the evaluation sets (Spec-Bench, MT-bench), fixed by question_id alone.

"dev" (question_id % DEV_EVERY == 0) is for training decisions (which head, which tree, which data); "test" (every
other row) is what published results use, so no published number comes from a prompt a decision was tuned on. Here,
below the benchmark and the trainer, so both read one rule.
"""
from __future__ import annotations

DEV_EVERY = 5  # a question is in the dev split when question_id % DEV_EVERY == 0


def in_dev_split(question_id: int | str) -> bool:
    """Whether an evaluation question belongs to the dev split."""
    return int(question_id) % DEV_EVERY == 0
