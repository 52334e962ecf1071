"""The benchmark protocol (docs/ARCHITECTURE.md §5): one uncounted warm-up per method, then per prompt every method
back to back in rotating order, `repeats` rounds keeping each method's fastest. `run_turn` runs one turn of
questions through it with the run's tables (core/bench/stack.py); both turns of `--turns 2` go through it.
"""
from __future__ import annotations

import sys
from dataclasses import replace

import torch

from core.bench.plan import Plan
from core.bench.report import spec_bench_speedup
from core.bench.rows import prompt_rows
from core.bench.runners import Outcome, Scorer, timed
from core.bench.stack import Stack
from core.engine.exactness import first_difference


def score_divergences(outcomes: dict[str, Outcome], ids: list[int], scorers: dict[str, Scorer]) -> dict[str, Outcome]:
    """Fill in generate()'s margins, up to the first differing token, for the methods that differ from baseline."""
    ref = outcomes.get("baseline")
    out = dict(outcomes)
    for m, score in scorers.items():
        o = outcomes.get(m)
        i = None if ref is None or o is None else first_difference(ref.tokens, o.tokens)
        if i is not None:
            margins, tops = score(ids, o.tokens[:i + 1])
            out[m] = replace(o, margins=tuple(margins), top_logits=tuple(tops))
    return out


def rotation(methods: tuple[str, ...], i: int) -> tuple[str, ...]:
    """Prompt i runs the methods starting with method i mod M."""
    k = i % len(methods)
    return methods[k:] + methods[:k]


def run_bench(questions: list[dict], prompts: list[list[int]], runners: dict, methods: tuple[str, ...],
              device: torch.device, seed: int, compare: bool, progress=None, scorers: dict[str, Scorer] | None = None,
              dtype: torch.dtype | str = "float32", repeats: int = 1,
              vocabs: dict[str, torch.Tensor] | None = None) -> list[dict]:
    """Warm up each method once on the first prompt, then run every prompt with rotating method order, `repeats`
    rounds per prompt (each round starts one method later), keeping each method's fastest round: a burst of other
    work on a shared machine then costs a round, not the comparison. The same seed gives the same tokens each round."""
    for m in methods:
        timed(*runners[m], prompts[0], seed + questions[0]["question_id"], device)
    rows: list[dict] = []
    for i, (q, ids) in enumerate(zip(questions, prompts)):
        outcomes: dict[str, Outcome] = {}
        for r in range(repeats):
            for m in rotation(methods, i + r):
                o = timed(*runners[m], ids, seed + q["question_id"], device)
                if m not in outcomes or o.seconds < outcomes[m].seconds:
                    outcomes[m] = o
        outcomes = {m: outcomes[m] for m in rotation(methods, i)}
        if compare and scorers:
            outcomes = score_divergences(outcomes, ids, scorers)
        rows += prompt_rows(q, outcomes, methods, compare, dtype, vocabs)
        if progress:
            progress(rows)
    return rows


def _progress_bar(total: int, methods: tuple[str, ...]):
    """A tqdm bar on stderr showing eagle2's running speedup, and the callback that advances it."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc="prompts", unit="prompt", file=sys.stderr, dynamic_ncols=True)
    ref = "hf" if "hf" in methods else "baseline"
    shown = "eagle2" if "eagle2" in methods else None

    def update(rows: list[dict]) -> None:
        if shown and ref in methods and shown != ref:
            s = spec_bench_speedup(rows, shown, ref)
            bar.set_postfix_str(f"{shown} vs {ref} {s:.2f}x" if s else "")
        bar.update(1)

    return bar, update


def run_turn(plan: Plan, stack: Stack, questions: list[dict], prompts: list[list[int]]) -> list[dict]:
    """One turn's rows: every method on every prompt under the protocol, with the same runners, scorers and draft
    vocabularies on every turn; compared with baseline when the run is greedy and baseline runs."""
    compare = plan.decode.sampling.greedy and "baseline" in plan.methods
    bar, progress = _progress_bar(len(questions), plan.methods)
    try:
        return run_bench(questions, prompts, stack.runners, plan.methods, stack.target.device, plan.seed, compare,
                         progress, stack.scorers, stack.target.dtype, plan.repeats, stack.vocabs)
    finally:
        bar.close()
