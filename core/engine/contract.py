"""The contracts the decode loop reads: what it asks of a drafter (`Drafter`, `DraftPool`) and of a target
(`Target`).

They live beside the loop (core/engine/eagle.py) so the loop never imports an implementation: the EAGLE, EAGLE-3, Medusa
and lookup drafters implement `Drafter`, and core/models/target.py's `TargetModel` (a stock transformers model) is the
`Target`. Every drafter the loop runs starts a per-call state, `commit`s the real target features of what was
accepted and `propose`s a candidate pool for each step; the loop reranks the pool (core/engine/tree.py), grafts the
context-lookup chain, verifies and accepts the same way for every drafter.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from core.engine.config import TreeConfig
from core.engine.tree import top_frontier


class Target(Protocol):
    """What the decoders ask of a target model (core/models/target.py `TargetModel` implements it)."""

    vocab_size: int
    eos_ids: frozenset[int]

    @property
    def device(self) -> torch.device: ...

    def new_cache(self) -> Any:
        """A fresh KV cache owned by one decode call."""

    def forward(self, ids: torch.Tensor, cache: Any, parents: list[int] | None = None,
                depths: list[int] | None = None, anc: torch.Tensor | None = None,
                output_layers: tuple[int, ...] = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
        """ids (1, T) after the cached prefix -> (last hidden (1, T, H), optional layer taps (1, T, L*H))."""

    def tree_logits(self, hidden: torch.Tensor, kids: list[list[int]]) -> Any:
        """(N, H) verify features -> their LM-head rows, now or on demand (core/engine/tree_logits.py `TreeLogits`)."""


def bit_exact(target: Any, rows: int) -> bool | None:
    """Whether a forward of `rows` new tokens after the prefill reproduces one-token steps bit for bit on `target`:
    its `exact_rows` (the row-invariant attention's probed width, 0 without it; core/models/target.py) covers them.
    None for a target that does not say (test fakes). A prompt's prefill is the same forward in every decoder, so
    a prefill counts as one row."""
    width = getattr(target, "exact_rows", None)
    return None if width is None else 1 <= rows <= width


def chain_room(target: Any, total_tokens: int) -> int | None:
    """The longest context-lookup chain that keeps a verify of `total_tokens` head nodes within the target's exact
    rows; None when there is no such limit (SDPA, a test fake, or a tree already wider than the exact rows)."""
    width = getattr(target, "exact_rows", 0) or 0
    return width - total_tokens if width >= total_tokens else None


@dataclass
class DraftPool:
    """All candidate nodes of one step (root at 0), before the rerank."""

    parents: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    forwards: int = 0  # draft passes spent growing this pool

    @classmethod
    def rooted(cls, root_token: int) -> "DraftPool":
        return cls(parents=[-1], tokens=[root_token], scores=[0.0])

    def add(self, parent: int, scores: list[float], tokens: list[int]) -> list[int]:
        """Append children of `parent`; returns their node ids."""
        start = len(self.tokens)
        self.parents += [parent] * len(tokens)
        self.tokens += tokens
        self.scores += scores
        return list(range(start, len(self.tokens)))


@runtime_checkable
class Drafter(Protocol):
    """What the EAGLE-2 loop asks of a drafter (core/engine/eagle.py reads it top to bottom, the same for every drafter)."""

    kind: str  # "eagle" | "eagle3" | "medusa" | "lookup": shown in the UI and the bench
    trained: bool  # False: still lossless, but the drafts are guesses (the UI says so)
    output_layers: tuple[int, ...]  # target layers whose outputs the drafter reads (EAGLE-3 taps); () = last hidden

    def start(self) -> Any:
        """A fresh state for one decode call (caches live here, never on the drafter)."""

    def commit(self, state: Any, features: torch.Tensor, next_ids: torch.Tensor) -> int:
        """Read the real features of committed tokens: features (1, n, F) at tokens t_i.., next_ids (1, n) =
        t_{i+1}.. (the last one is the root of the next step). Returns the draft passes it ran."""

    def propose(self, state: Any, root_token: int, tree: TreeConfig) -> DraftPool | None:
        """The candidate pool under `root_token` for this step (None: no head drafts; lookup may still graft)."""


def unsure(pool: DraftPool, frontier: list[int], tree: TreeConfig) -> bool:
    """Dynamic depth (TreeConfig.stop_below): whether the best node of the level just drafted (`frontier`, best
    first) is too unlikely for anything below it to be drafted."""
    return bool(tree.stop_below) and math.exp(pool.scores[frontier[0]]) < tree.stop_below


def grow_beam(pool: DraftPool, level_topk, tree: TreeConfig) -> DraftPool:
    """EAGLE-2's expansion when a level's guesses do not depend on the path (Medusa): level d's top-k
    (log-probs, tokens) from `level_topk(d)` hang under each of the top_k best nodes of level d - 1, and with
    dynamic depth no level hangs under one whose best node is `unsure` (its rows cost no pass here, but the verify
    budget then goes to the likelier levels, as for the EAGLE heads)."""
    frontier = [0]
    for d in range(tree.depth):
        if d and unsure(pool, frontier, tree):
            break
        got = level_topk(d)
        if got is None:
            break
        vals, toks = got
        cand: list[int] = []
        for n in frontier:
            cand += pool.add(n, [v + pool.scores[n] for v in vals], toks)
        frontier = top_frontier(cand, pool.scores, tree.top_k)
    return pool
