"""The bench's per_prompt rows: one method's outcome on one prompt, compared with the baseline's at T = 0.

A row that differs from the baseline carries `divergence`, classified by core/engine/exactness.py; a lane whose head
drafts over a reduced vocabulary counts the output tokens inside it (`in_draft_vocab`). A peer that decodes its own
weights (llama.cpp on a GGUF) names them (`weights`) instead: its difference from baseline is recorded, not explained.
"""
from __future__ import annotations

import torch

from core.bench.runners import Outcome
from core.engine.exactness import classify, first_difference
from core.engine.loops import loop_period
from core.engine.metrics_names import serving_names


def divergence_record(reference: Outcome, o: Outcome, dtype: torch.dtype | str) -> dict:
    """{"index", "baseline_margin", "method_margin", "near_tie", "tolerance"} of a row that differs from baseline.

    Outputs that differ only in length (one a prefix of the other) have no differing token to explain: near_tie
    False, margins None.
    """
    d = classify(reference.tokens, o.tokens, reference.margins, o.margins, reference.top_logits, o.top_logits, dtype)
    if d is None:
        return {"index": min(len(o.tokens), len(reference.tokens)), "baseline_margin": None, "method_margin": None,
                "near_tie": False, "tolerance": None}
    return {k: v for k, v in d.as_dict().items() if k != "label"}


def make_row(q: dict, method: str, o: Outcome, reference: Outcome | None, dtype: torch.dtype | str = "float32",
             vocab: torch.Tensor | None = None) -> dict:
    """One per_prompt row; `reference` = baseline's outcome when compared (T = 0), else None; `vocab` = the (V,)
    bool mask of the method head's reduced draft vocabulary, if it has one."""
    n = len(o.tokens)
    same = None if reference is None else o.tokens == reference.tokens
    first_diff = None
    if same is False:
        first_diff = first_difference(o.tokens, reference.tokens)
        first_diff = min(n, len(reference.tokens)) if first_diff is None else first_diff
    row = {"question_id": q["question_id"], "turn": q.get("turn", 1), "category": q["group"], "method": method,
           "new_tokens": n, "token_ids": list(o.tokens),
           "accept_lengths": None if o.step_tokens is None else list(o.step_tokens),
           "seconds": o.seconds, "tokens_per_s": n / o.seconds if o.seconds > 0 else 0.0,
           "target_forwards": o.target_forwards, "tau": n / o.target_forwards if o.target_forwards else None,
           "identical_to_baseline": same, "first_mismatch": first_diff, "loop_period": loop_period(o.tokens)}
    if o.weights is not None:  # another model's weights: a difference is information, not a divergence to explain
        row["weights"] = o.weights
    elif same is False:
        row["divergence"] = divergence_record(reference, o, dtype)
    if vocab is not None:
        row["in_draft_vocab"] = int(vocab[torch.tensor(o.tokens, dtype=torch.long)].sum()) if n else 0
    if o.stats is not None:  # our decoders: mean ms per decode step (prefill excluded), split by what it ran
        verify, draft, other = o.stats.step_split_ms
        row["step_ms"] = {"target": verify, "draft": draft, "other": other, "steps": o.stats.target_forwards - 1}
    if o.drafted and o.stats is not None:  # our speculative decoders: tree statistics
        row.update(steps=o.stats.steps, accepted_drafts=o.stats.accepted_drafts, drafted_tokens=o.stats.drafted_tokens,
                   accept_rate=o.stats.accept_rate, accept_hist=list(o.stats.accept_hist),
                   depth_accept=list(o.stats.depth_accept), accepted_lookup=o.stats.accepted_lookup,
                   accepted_head=o.stats.accepted_head)
        row.update(serving_names(row))  # vLLM's names beside ours (core/engine/metrics_names.py)
    return row


def prompt_rows(q: dict, outcomes: dict[str, Outcome], methods: tuple[str, ...], compare: bool,
                dtype: torch.dtype | str = "float32", vocabs: dict[str, torch.Tensor] | None = None) -> list[dict]:
    """Rows of one prompt in method order; compared with baseline when `compare` and baseline ran."""
    ref = outcomes["baseline"] if compare and "baseline" in outcomes else None
    return [make_row(q, m, outcomes[m], ref, dtype, (vocabs or {}).get(m)) for m in methods]
