"""`auto` tree size: the measured verify cost of this target on this hardware, combined with observed acceptance.

EAGLE-2 ranks draft nodes by cumulative draft probability, which is calibrated (arXiv 2406.16858 §3.2): the
expected number of accepted drafts of a tree is close to the sum of exp(score) over its nodes. One calibration run
with a large tree records the ranked node scores per step; the best `total_tokens` N maximises
    (1 + c * E[sum of the top N-1 exp(scores)]) / (draft time + verify time(N)),
where c rescales predicted to observed acceptance and verify time(N) is timed on this machine.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core import kv_cache, tree
from core.config import DecodeConfig, SamplingConfig, TreeConfig
from core.eagle import Eagle2Decoder
from core.models import TargetModel
from core.sampling import row_max
from core.timing import now

SIZES = (2, 4, 8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class AutoTreeReport:
    chosen: TreeConfig
    verify_ms: dict[int, float]  # tree tokens -> verify forward + LM head, ms
    expected_tokens: dict[int, float]  # tree tokens -> predicted tokens per step
    draft_ms: float
    calibration: float


def verify_profile(target: TargetModel, sizes=SIZES, prefix: int = 64, rounds: int = 5,
                   clock: Callable[[torch.device], float] = now) -> dict[int, float]:
    """Fastest ms seen for one tree verify (forward + LM head) of N tokens after a `prefix`-token context.

    Sizes are timed round-robin, each round in the opposite order to the last, and the minimum per size is kept.
    Other work on the machine only ever slows a reading, so a burst of load spoils one round for a few sizes rather
    than every repeat of one size (timed back to back, a 3 s burst once made 2 tokens read 500 ms against 122 ms
    for 48, and `auto` chose a tree three times too big).
    """
    cache = target.new_cache()
    ids = torch.randint(0, min(1000, target.vocab_size), (1, prefix), generator=torch.Generator().manual_seed(0))
    ids = ids.to(target.device)
    target.forward(ids, cache)
    trees = {}
    for n in sizes:
        parents = [-1] + [max(0, (i - 1) // 2) for i in range(1, n)]  # a bushy binary tree
        trees[n] = (parents, tree.depths(parents), tree.ancestor_mask(parents))
    best = {n: math.inf for n in sizes}
    for r in range(rounds):
        for n in (sizes if r % 2 == 0 else tuple(reversed(sizes))):
            parents, d, anc = trees[n]
            t0 = clock(target.device)
            h, _ = target.forward(ids[:, :n], cache, parents, d, anc)
            row_max(target.logits(h[0]))  # what a greedy verify does with the logits
            best[n] = min(best[n], clock(target.device) - t0)
            kv_cache.crop(cache, prefix)
    kv_cache.free(cache)
    return {n: best[n] * 1e3 for n in sizes}


def choose_tree(decoder: Eagle2Decoder, prompt_ids: list[int], depth: int = 6, top_k: int = 8,
                max_new_tokens: int = 64, sizes=SIZES, sampling: SamplingConfig | None = None) -> AutoTreeReport:
    """Pick total_tokens for (depth, top_k) from one calibration generation and a verify-latency profile.

    `sampling` is the run's own (acceptance at T=1 is far below greedy's, so a greedy calibration would oversize
    a sampled run's tree); greedy when None.
    """
    big = TreeConfig(total_tokens=max(sizes), depth=depth, top_k=top_k, lookup=0)  # calibrate the head alone
    cfg = DecodeConfig(max_new_tokens, sampling or SamplingConfig(), tree=big)
    steps = [e for e in decoder.generate(prompt_ids, cfg) if e.tree]
    prof = verify_profile(decoder.target, sizes)
    if not steps:
        return AutoTreeReport(TreeConfig(depth=depth, top_k=top_k), prof, {}, 0.0, 1.0)
    ranked = [sorted((math.exp(n.score) for n in e.tree if n.node_id), reverse=True) for e in steps]
    predicted = sum(sum(r) for r in ranked) / len(steps)
    observed = sum(e.accepted_drafts for e in steps) / len(steps)
    c = observed / predicted if predicted > 0 else 1.0
    draft_ms = statistics.median(e.draft_ms for e in steps)  # median: a burst of load must not set the draft cost
    expected = {n: 1.0 + c * sum(sum(r[: n - 1]) for r in ranked) / len(steps) for n in sizes}
    if observed == 0:  # nothing accepted (e.g. an untrained head): drafting cannot pay, verify the least
        best = min(sizes)
    else:
        best = max(sizes, key=lambda n: expected[n] / (draft_ms + prof[n]))
    return AutoTreeReport(TreeConfig(total_tokens=best, depth=depth, top_k=top_k), prof, expected, draft_ms, c)
