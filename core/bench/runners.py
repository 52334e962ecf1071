"""Benchmark runners: each method as a (timed runner, digest) pair, and the one timing function they all go through.

Our decoders (the lanes: baseline, EAGLE-2 and its variants, Medusa, lookup) run through `core_runner`; the peers
(transformers' generate() and llama.cpp, core/bench/peers.py) through their own runners. All are timed the same way:
perf_counter (after a CUDA synchronize) around the whole call. Digests compute statistics outside the timed region.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import torch

from core.engine.config import DecodeConfig, SamplingConfig
from core.engine.events import RunStats, summarize
from core.engine.timing import now


@dataclass(frozen=True)
class Outcome:
    """One method on one prompt."""

    tokens: tuple[int, ...]
    seconds: float
    target_forwards: int | None
    stats: RunStats | None = None  # our decoders only
    margins: tuple[float, ...] = ()  # per token: top-1 minus top-2 logit (core/engine/exactness.py); hf: filled on demand
    top_logits: tuple[float, ...] = ()
    drafted: bool = False  # our speculative decoders: the row carries tree statistics
    # tokens each target forward produced, in order (Spec-Bench's accept_lengths); None where not observable
    # (generate() with prompt lookup verifies inside transformers)
    step_tokens: tuple[int, ...] | None = None
    # a peer that decodes its own weights (llama.cpp on a GGUF file): the file's name; its tokens may differ from
    # the baseline's as another model's would (rows.py records the difference without explaining it)
    weights: str | None = None


Runner = Callable[[list[int], int], object]  # (prompt ids, seed) -> raw output, timed as a whole
Digest = Callable[[object, float], Outcome]  # (raw output, seconds) -> Outcome, outside the timed region
Scorer = Callable[[list[int], tuple[int, ...]], tuple[list[float], list[float]]]  # (prompt, tokens) -> margins, top-1


def core_runner(decoder, cfg: DecodeConfig) -> tuple[Runner, Digest]:
    """Consume one of our decoders' generators; statistics are computed outside the timed region."""

    def run(ids: list[int], seed: int):
        c = DecodeConfig(cfg.max_new_tokens, SamplingConfig(**{**asdict(cfg.sampling), "seed": seed}), cfg.tree)
        return list(decoder.generate(ids, c))

    def digest(events, seconds: float) -> Outcome:
        st = summarize(events)
        return Outcome(tuple(t for e in events for t in e.new_token_ids), seconds, st.target_forwards, st,
                       tuple(m for e in events for m in e.margins), tuple(t for e in events for t in e.top_logits),
                       hasattr(decoder, "drafter"), tuple(len(e.new_token_ids) for e in events))

    return run, digest


def timed(run: Runner, digest: Digest, ids: list[int], seed: int, device: torch.device) -> Outcome:
    """Wall-clock one whole generation (synchronized on CUDA), then digest it outside the timed region."""
    t0 = now(device)
    raw = run(ids, seed)
    seconds = now(device) - t0
    return digest(raw, seconds)
