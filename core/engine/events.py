"""The immutable per-step record that flows from the decoders to the UI, and its pure summary.

Notation (docs/ARCHITECTURE.md §4): tau = new tokens / target forward passes, bonus token included (plain decoding = 1.00).
Per-depth acceptance is UNCONDITIONAL: share of verify steps whose accepted path reached depth d.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from core.engine.loops import loop_period


@dataclass(frozen=True)
class TreeNode:
    node_id: int  # 0 = root (the last committed token)
    parent: int  # -1 for the root
    token_id: int
    depth: int  # root 0
    score: float  # cumulative draft log-probability (EAGLE-2's ranking value); root and lookup nodes 0.0
    accepted: bool
    source: str = "head"  # "root" | "head" (draft head) | "lookup" (copied from the context, core/engine/lookup.py)


@dataclass(frozen=True)
class StepEvent:
    step: int
    method: str  # "baseline" | "eagle2"
    new_token_ids: tuple[int, ...]  # accepted drafts then the target's own (bonus) token
    tree: tuple[TreeNode, ...] = ()  # empty for baseline and for the prefill step
    accepted_path: tuple[int, ...] = ()  # node ids, root first
    draft_ms: float = 0.0  # draft-head passes: growing the tree and reading the accepted features (extend)
    verify_ms: float = 0.0  # the target's forward over the step's tokens, LM head included
    step_ms: float = 0.0  # compute time of this step measured inside core; the rest of it is "other" (tree
    #                       building, context lookup, acceptance, margins, KV compaction, the step record)
    target_forwards: int = 1
    draft_forwards: int = 0
    finished: bool = False
    note: str = ""  # e.g. "untrained head"
    # greedy runs, per new token, aligned with new_token_ids: the target's top-1 minus top-2 logit at the position
    # that chose it, and that top-1 logit (core/engine/exactness.py: explains where two greedy runs part ways); empty when
    # sampled (sampled runs are not compared token by token)
    margins: tuple[float, ...] = ()
    top_logits: tuple[float, ...] = ()
    # whether this forward's rows equal one-token steps bit for bit in the dtype (the target's row-invariant attention
    # and a verify within its probed rows, core/models/invariance.py); None when the target does not say
    bit_exact: bool | None = None

    @property
    def accepted_drafts(self) -> int:
        return max(len(self.accepted_path) - 1, 0)

    @property
    def accepted_lookup(self) -> int:
        """Accepted drafts that were copied from the context (nodes with source "lookup", core/engine/lookup.py); the rest
        of accepted_drafts came from the draft head. Derived from the tree and path, so it can never disagree with
        them."""
        src = {n.node_id: n.source for n in self.tree}
        return sum(src.get(i) == "lookup" for i in self.accepted_path[1:])


@dataclass(frozen=True)
class RunStats:
    method: str
    new_tokens: int
    seconds: float
    tokens_per_s: float
    ttft_s: float  # time to first token
    tau: float
    target_forwards: int
    draft_forwards: int
    draft_s: float
    verify_s: float
    steps: int  # verify steps (prefill excluded)
    drafted_tokens: int  # non-root tree nodes verified, summed over steps
    accepted_drafts: int
    accept_rate: float  # accepted drafts / drafted tree tokens
    accept_hist: tuple[int, ...] = field(default_factory=tuple)  # steps that accepted exactly j drafts
    depth_accept: tuple[float, ...] = field(default_factory=tuple)  # P(path reaches depth d), d = 1..
    # mean ms per decode step after the prefill: target forward, draft-head passes, everything else
    step_split_ms: tuple[float, float, float] = (0.0, 0.0, 0.0)
    accepted_lookup: int = 0  # accepted drafts copied from the context; accepted_drafts - this came from the head
    loop_period: int | None = None  # the output ends in a loop of this period (core/engine/loops.py), else None
    # every forward of the run reproduced plain decoding's one-token steps bit for bit in its dtype (invariant
    # attention, verifies within the probed rows, a supported family); None when the target does not say
    bit_exact: bool | None = None

    @property
    def accepted_head(self) -> int:
        return self.accepted_drafts - self.accepted_lookup

    @property
    def lookup_share(self) -> float | None:
        """Share of accepted drafts copied from the context (None when nothing was accepted)."""
        return self.accepted_lookup / self.accepted_drafts if self.accepted_drafts else None

    @property
    def other_s(self) -> float:
        """Step time spent outside the target forward and the draft head (tree, lookup, acceptance, KV, record)."""
        return max(self.seconds - self.draft_s - self.verify_s, 0.0)

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["accept_hist"] = list(self.accept_hist)
        d["depth_accept"] = list(self.depth_accept)
        d["step_split_ms"] = list(self.step_split_ms)
        d["other_s"] = self.other_s
        d["accepted_head"] = self.accepted_head
        d["lookup_share"] = self.lookup_share
        return d


def summarize(events: list[StepEvent] | tuple[StepEvent, ...]) -> RunStats:
    """Aggregate step records into request statistics (pure)."""
    events = list(events)
    method = events[0].method if events else ""
    tokens = sum(len(e.new_token_ids) for e in events)
    seconds = sum(e.step_ms for e in events) / 1000.0
    ttft = events[0].step_ms / 1000.0 if events else 0.0
    target_fw = sum(e.target_forwards for e in events)
    verify_steps = [e for e in events if e.tree]
    hist: list[int] = []
    for e in verify_steps:
        j = e.accepted_drafts
        hist.extend([0] * (j + 1 - len(hist)))
        hist[j] += 1
    n = len(verify_steps)
    max_depth = len(hist) - 1
    depth_accept = tuple(sum(hist[j] for j in range(d, len(hist))) / n for d in range(1, max_depth + 1)) if n else ()
    drafted = sum(len(e.tree) - 1 for e in verify_steps)
    decode = [e for e in events if e.step > 0]  # the prefill step is a different shape of work
    split = (0.0, 0.0, 0.0)
    if decode:
        v, d = (sum(e.verify_ms for e in decode) / len(decode), sum(e.draft_ms for e in decode) / len(decode))
        split = (v, d, max(sum(e.step_ms for e in decode) / len(decode) - v - d, 0.0))
    accepted = sum(e.accepted_drafts for e in verify_steps)
    return RunStats(
        method=method,
        new_tokens=tokens,
        seconds=seconds,
        tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
        ttft_s=ttft,
        tau=tokens / target_fw if target_fw else 0.0,
        target_forwards=target_fw,
        draft_forwards=sum(e.draft_forwards for e in events),
        draft_s=sum(e.draft_ms for e in events) / 1000.0,
        verify_s=sum(e.verify_ms for e in events) / 1000.0,
        steps=n,
        drafted_tokens=drafted,
        accepted_drafts=accepted,
        accept_rate=accepted / drafted if drafted else 0.0,
        accept_hist=tuple(hist),
        depth_accept=depth_accept,
        step_split_ms=split,
        accepted_lookup=sum(e.accepted_lookup for e in verify_steps),
        loop_period=loop_period([t for e in events for t in e.new_token_ids]),
        bit_exact=run_bit_exact(events),
    )


def run_bit_exact(events: list[StepEvent]) -> bool | None:
    """True when every forward of the run was bit-exact, False when one was not, None when a step did not say."""
    flags = [e.bit_exact for e in events]
    if not flags or None in flags:
        return None
    return all(flags)


class Decoder(Protocol):
    """What the app and the benchmark consume: core's BaselineDecoder and Eagle2Decoder (for any drafter), and the
    tests' replaying fakes, all implement it. `target` is the TargetModel it runs on (None for a fake that has no
    model); `note` is shown to the user (e.g. "untrained head"), empty when there is nothing to say."""

    method: str
    note: str
    target: Any

    def generate(self, prompt_ids: list[int], cfg: Any,
                 should_stop: Callable[[], bool] | None = None) -> Iterator[StepEvent]:
        """One StepEvent per target forward until EOS, max_new_tokens or should_stop()."""
