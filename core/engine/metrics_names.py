"""Serving-engine names for this project's statistics: vLLM's speculative-decoding metrics beside our keys.

vLLM counts, per verify step of a draft ("a draft"), the draft tokens proposed and the tokens accepted, and derives
(vllm/v1/spec_decode/metrics.py, the "SpecDecoding metrics" log line and the vllm:spec_decode_* counters):

| vLLM name | formula | this project's key (kept as an alias for one release) |
|---|---|---|
| num_drafts | verify steps that checked a draft | steps |
| num_draft_tokens | draft tokens verified (tree nodes below the root) | drafted_tokens |
| num_accepted_tokens | draft tokens accepted | accepted_drafts |
| mean_acceptance_length | 1 + num_accepted_tokens / num_drafts | tau (see below) |
| draft_acceptance_rate | num_accepted_tokens / num_draft_tokens | accept_rate |
| per_position_acceptance_rate | accepted at position i / num_drafts, i = 1.. | depth_accept |

τ (`tau`) is new tokens / target forward passes, so it also counts the prefill pass (one token for one pass);
vLLM's mean acceptance length counts verify steps only. The two agree up to that one pass (τ is a little lower on a
short answer); both are reported. A lane that drafts nothing (plain decoding) has num_drafts 0 and a mean
acceptance length of 1. Pure functions over the dicts RunStats.as_dict() and the bench rows hold.
"""
from __future__ import annotations

# vLLM name -> this project's key it aliases (same value); mean_acceptance_length is derived, not an alias
ALIASES = {
    "num_drafts": "steps",
    "num_draft_tokens": "drafted_tokens",
    "num_accepted_tokens": "accepted_drafts",
    "draft_acceptance_rate": "accept_rate",
    "per_position_acceptance_rate": "depth_accept",
}


def mean_acceptance_length(num_drafts: int, num_accepted_tokens: int) -> float:
    """vLLM's mean acceptance length: tokens per verify step, the target's own (bonus) token included."""
    return 1.0 + num_accepted_tokens / num_drafts if num_drafts else 1.0


def serving_names(stats: dict) -> dict:
    """vLLM's names for one run's statistics (a RunStats.as_dict() or a bench row with steps, drafted_tokens,
    accepted_drafts, accept_rate, depth_accept); keys the dict lacks are left out, and a lane that drafted nothing
    gets num_drafts 0 and mean_acceptance_length 1."""
    out = {new: stats[old] for new, old in ALIASES.items() if old in stats}
    if "num_drafts" in out:
        out["mean_acceptance_length"] = mean_acceptance_length(out["num_drafts"], out.get("num_accepted_tokens", 0))
    return out


def with_serving_names(stats: dict) -> dict:
    """The statistics with vLLM's names added; this project's keys stay (documented aliases, docs/metrics.md)."""
    return {**stats, **serving_names(stats)}
