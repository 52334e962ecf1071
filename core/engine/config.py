"""Frozen configuration records, validated once at the boundary.

Knobs are named by what they count (EAGLE issue #118):
  total_tokens  tree nodes sent to the target per step, ROOT INCLUDED (1 = plain decoding through the tree path)
  depth         deepest draft level below the root = number of draft-head passes per step
  top_k         children kept per expanded node, and nodes expanded per level
  lookup        longest chain copied from the context (core/engine/lookup.py) and grafted under the root; 0 = head only
  stop_below    dynamic depth: no draft level below one whose best cumulative draft probability is under it; 0 = off
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


class DecodeError(ValueError):
    """A request that cannot continue (e.g. NaN/inf logits from a broken head or target): stop it, keep serving."""


def all_finite(values) -> bool:
    """True when a tensor (or list of floats) holds no NaN or inf; one cheap reduction."""
    import torch

    return bool(torch.isfinite(values).all()) if isinstance(values, torch.Tensor) else all(map(math.isfinite, values))


def check_finite(what: str, values) -> None:
    """Raise DecodeError when a tensor (or list of floats) holds NaN or inf; one cheap reduction per step."""
    if not all_finite(values):
        raise DecodeError(f"{what} contain NaN or inf; this request was stopped (broken model or head weights?)")


MIN_TEMPERATURE = 1e-3  # below this, logits / T overflow float32 (T ~ 1e-37 turns every probability into NaN)


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 = greedy (argmax); > 0 samples from the processed target distribution
    top_p: float = 1.0  # nucleus mass kept, in (0, 1]
    top_k: int = 0  # 0 = no top-k filter
    seed: int = 0  # seeds the torch.Generator owned by one decode call

    def __post_init__(self) -> None:
        _check_number("temperature", self.temperature, 0.0, 10.0)
        if 0.0 < self.temperature < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, got {self.temperature:g}")
        _check_number("top_p", self.top_p, 0.0, 1.0, low_open=True)
        _check_int("top_k (sampling)", self.top_k, 0, 1_000_000)
        _check_int("seed", self.seed, 0, 2**63 - 1)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


COPY_GROWTH = 4  # a copy in progress may verify up to 4x `lookup` copied tokens per step (TreeConfig.copy_lookup)
COPY_MAX = 64  # ... and never more than 64 (the largest `lookup` allowed)


@dataclass(frozen=True)
class TreeConfig:
    total_tokens: int = 16  # nodes verified per step, root included (core/engine/autotree.py picked 16 on a 2-core CPU)
    depth: int = 6  # draft levels below the root
    top_k: int = 6  # branching per expanded node and frontier width
    lookup: int = 10  # context-lookup chain length grafted under the root (extra verify tokens); 0 = off
    # dynamic depth: the head drafts no level below one whose best guess has a cumulative draft probability under
    # this, so a step where it is unsure pays for fewer passes (0 = EAGLE-2's fixed depth; core/drafters/eagle.py)
    stop_below: float = 0.0

    def __post_init__(self) -> None:
        _check_int("total_tokens", self.total_tokens, 1, 512)
        _check_int("depth", self.depth, 1, 32)
        _check_int("top_k", self.top_k, 1, 64)
        _check_int("lookup", self.lookup, 0, 64)
        _check_number("stop_below", self.stop_below, 0.0, 1.0, high_open=True)

    @property
    def copy_lookup(self) -> int:
        """The longest chain a copy in progress grows to: `lookup` doubles after each step that accepted its whole
        chain (core/engine/eagle.py), up to COPY_GROWTH times `lookup` and at most COPY_MAX."""
        return min(COPY_GROWTH * self.lookup, max(COPY_MAX, self.lookup))

    @property
    def reach(self) -> int:
        """How far past the committed prefix one verify can write: the head's depth or the lookup chain's length
        (a grown copy chain never runs past max_new_tokens, core/engine/eagle.py)."""
        return max(self.depth, self.lookup)

    @classmethod
    def parse(cls, text: str) -> "TreeConfig":
        """Parse 'T,D,K', 'T,D,K,L' or 'T,D,K,L,S' (e.g. '24,6,6' keeps the default lookup; '24,6,6,0' turns it
        off; '16,6,8,0,0.1' also stops drafting below a level whose best guess is under 0.1)."""
        parts = [p.strip() for p in str(text).split(",")]
        ints, stop = parts[:4], parts[4:]
        if len(parts) not in (3, 4, 5) or not all(p.lstrip("-").isdigit() for p in ints) or \
                not all(_is_number(p) for p in stop):
            raise ValueError("tree must be 'total_tokens,depth,top_k[,lookup[,stop_below]]' like 24,6,6 or 24,6,6,0 "
                             f"or 16,6,8,0,0.1, got {text!r}")
        names = ("total_tokens", "depth", "top_k", "lookup")
        return cls(**dict(zip(names, (int(p) for p in ints))), **({"stop_below": float(stop[0])} if stop else {}))

    def spec(self) -> str:
        """The 'T,D,K,L[,S]' text `parse` reads back (S only when dynamic depth is on)."""
        base = f"{self.total_tokens},{self.depth},{self.top_k},{self.lookup}"
        return base + (f",{self.stop_below:g}" if self.stop_below else "")


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


@dataclass(frozen=True)
class DecodeConfig:
    max_new_tokens: int = 128
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    stop_on_eos: bool = True

    def __post_init__(self) -> None:
        _check_int("max_new_tokens", self.max_new_tokens, 1, 100_000)


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")


def _check_number(name: str, value: object, low: float, high: float, low_open: bool = False,
                  high_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if v < low or v > high or (low_open and v == low) or (high_open and v == high):
        bound = ("(" if low_open else "[") + f"{low}, {high}" + (")" if high_open else "]")
        raise ValueError(f"{name} must be in {bound}, got {value}")
