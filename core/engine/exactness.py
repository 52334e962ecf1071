"""Where and why two greedy runs of the same target diverge: top-2 logit margins and a pure near-tie rule.

EAGLE-2 verifies a tree of N tokens in one forward while plain decoding runs one token at a time. In fp32 both give
the same tokens (tests/system/test_equivalence.py). In bf16 the two shapes round differently (other GEMM blocking, other
reduction order), so the same position's logits differ by a few units in the last place; when the target's top two
logits are that close, the greedy choice can flip and the texts part ways from there on. That is a property of the
arithmetic, not of speculative decoding: serving engines call it "lossless up to the precision limits of hardware
numerics". This module lets the UI and the benchmark say which case a divergence is, from facts recorded while
decoding (StepEvent.margins / top_logits), never from decoded text.

Near-tie rule. ulp(x) = eps(dtype) * 2**floor(log2 |x|) is the dtype's spacing at |x| (bf16 eps = 2**-7, fp32
2**-23). At the first differing token index i the baseline chose token x with margin m_b (its top-1 minus top-2
logit) and the method chose y with margin m_m. Since the baseline's l_x - l_y >= m_b and the method's l'_y - l'_x
>= m_m, the logit difference d = l_x - l_y changed between the two runs by (l_x - l_y) - (l'_x - l'_y) >= m_b + m_m.
Rounding can only explain the flip if it can change a logit difference that much, so with D the largest change
rounding makes to a logit difference:

    near_tie  <=>  m_baseline + m_method <= D,   D = NEAR_TIE_ULPS * ulp(max |top-1 logit|, dtype)

A run without a recorded margin at i explains nothing: the divergence is a "mismatch", which would be a bug.

Why NEAR_TIE_ULPS = 16. An a-priori bound from the unit roundoff (u = eps / 2 = 2**-8 in bf16) does not help: a
logit is a length-H dot product (H = 640 to 896 here) at the end of a network whose every matmul rounds, and the
worst-case bound gamma_H = H*u / (1 - H*u) already exceeds 1 for one dot product. So D is measured: on the packaged
Gemma 3 270M in bf16 (sourdough prompt of the README, default tree), over the 8 positions before the divergence,
the two runs' top-1 logits differed by at most 2 ulps and their top-2 margins (a logit difference) by at most 16
ulps. The largest change of a logit difference seen is D = 16 ulps at the top-1 logit. Every recorded bf16 divergence
of the earlier bench runs has m_b + m_m <= 7 ulps (docs/trust.md, "Earlier results re-classified"), so D leaves
more than a factor of two over what rounding was seen to do, while a divergence where either run won by more than
16 ulps can no longer hide behind a small margin on the other side. In fp32 D is ~3e-5 at logits of 30, so fp32
runs, which match token for token, flag any real divergence as a mismatch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from core.engine.events import StepEvent
from core.engine.sampling import peak

NEAR_TIE_ULPS = 16  # the largest change of a logit difference seen between the two shapes in bf16 (module docstring)


def top2(logits: torch.Tensor) -> tuple[list[float], list[float]]:
    """(R, V) logits -> (margins, top-1 values), R floats each: top-1 minus top-2 logit per row (core/engine/sampling.py
    `peak`, the same numbers as topk(2) at a fifth of its cost)."""
    peaks = [peak(row) for row in logits]
    return [p.margin for p in peaks], [p.logit for p in peaks]


def ulp(x: float, dtype: torch.dtype | str) -> float:
    """The dtype's spacing at |x| (normal numbers): eps * 2**floor(log2 |x|); eps at |x| < 1."""
    eps = torch.finfo(as_dtype(dtype)).eps
    ax = abs(x)
    return eps * 2.0 ** math.floor(math.log2(ax)) if ax >= 1.0 else eps


def as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """torch.bfloat16 or its name ("bfloat16", "torch.bfloat16", "bf16") -> torch.dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).removeprefix("torch.")
    name = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(name, name)
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    return dt


def tolerance(top1_logits: Sequence[float], dtype: torch.dtype | str) -> float:
    """D: NEAR_TIE_ULPS ulps of the dtype at the largest |top-1 logit| of the runs compared, the largest change
    rounding is taken to make to a logit difference (module docstring)."""
    return NEAR_TIE_ULPS * ulp(max((abs(x) for x in top1_logits), default=0.0), dtype)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first token where a and b differ; None when one is a prefix of the other (e.g. a run stopped)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


@dataclass(frozen=True)
class Divergence:
    """The first differing token of two greedy runs of one target, with both runs' top-2 margins there."""

    index: int  # generated-token index (0 = first new token)
    baseline_margin: float | None  # None when that run recorded no margin (older records)
    method_margin: float | None
    tolerance: float  # D: NEAR_TIE_ULPS ulps at the larger top-1 logit, in logit units
    near_tie: bool  # both margins known and their sum <= tolerance

    @property
    def label(self) -> str:
        return "numerical near tie" if self.near_tie else "mismatch"

    def as_dict(self) -> dict:
        return {"index": self.index, "baseline_margin": self.baseline_margin, "method_margin": self.method_margin,
                "near_tie": self.near_tie, "tolerance": self.tolerance, "label": self.label}


def classify(baseline: Sequence[int], method: Sequence[int], baseline_margins: Sequence[float],
             method_margins: Sequence[float], baseline_top: Sequence[float], method_top: Sequence[float],
             dtype: torch.dtype | str) -> Divergence | None:
    """The first divergence of `method` from `baseline` and whether a near tie explains it; None if none.

    Margins and top-1 logits are aligned with the token lists (one per generated token). A near tie needs the SUM of
    both runs' margins within the tolerance (module docstring); a run without a margin at the index (not recorded)
    cannot be explained, so the divergence counts as a mismatch whatever the other run's margin.
    """
    i = first_difference(baseline, method)
    if i is None:
        return None
    mb = baseline_margins[i] if i < len(baseline_margins) else None
    mm = method_margins[i] if i < len(method_margins) else None
    tops = [t[i] for t in (baseline_top, method_top) if i < len(t)]
    tol = tolerance(tops, dtype)
    return Divergence(i, mb, mm, tol, is_near_tie(mb, mm, tol))


def is_near_tie(baseline_margin: float | None, method_margin: float | None, tol: float | None) -> bool:
    """The rule alone: both margins recorded and together within the rounding change `tol` (None: unknown)."""
    if baseline_margin is None or method_margin is None or tol is None:
        return False
    return baseline_margin + method_margin <= tol


def divergence_of(baseline: Sequence[StepEvent], method: Sequence[StepEvent],
                  dtype: torch.dtype | str) -> Divergence | None:
    """classify() over two runs' step records (tokens, margins and top-1 logits as the decoders recorded them)."""

    def flat(events: Sequence[StepEvent], name: str) -> list:
        return [x for e in events for x in getattr(e, name)]

    return classify(flat(baseline, "new_token_ids"), flat(method, "new_token_ids"), flat(baseline, "margins"),
                    flat(method, "margins"), flat(baseline, "top_logits"), flat(method, "top_logits"), dtype)


def short_name(dtype: torch.dtype | str) -> str:
    """torch.bfloat16 -> "bf16", float16 -> "fp16", float32 -> "fp32" (labels)."""
    name = str(as_dtype(dtype)).removeprefix("torch.")
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}.get(name, name)
