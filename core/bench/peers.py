"""Peers: decoders outside our engine, timed beside the lanes the same way (core/bench/runners.py `timed`).

Today's peers are transformers' generate(), plain (`hf`) and with prompt lookup (`hf-pld`, Spec-Bench's PLD
setting), and llama.cpp on GGUF files (`llamacpp`, core/bench/llamacpp.py). A peer is a `Peer` in `PEERS`: how its
timed runner, and the untimed scorer that reads its margins where its tokens differ from the baseline's, are built
for a loaded target. A peer that runs a file of its own (llama.cpp: `--gguf FILE`, repeatable) is a line in
`FILE_PEERS` instead, and races one row per file. Another engine joins the race as one module with its runner and one
line in either table; every other method is a lane (core/lanes.py).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from core.bench import llamacpp
from core.bench.runners import Digest, Outcome, Runner, Scorer
from core.engine.config import DecodeConfig
from core.engine.exactness import top2
from core.models.target import TargetModel

PLD_TOKENS = 10  # prompt_lookup_num_tokens, as in Spec-Bench's PLD runs


def hf_generation_config(target: TargetModel, tok, cfg: DecodeConfig, pld: bool):
    """An explicit, neutral GenerationConfig matching our SamplingConfig (no repetition penalty, no model defaults)."""
    from transformers import GenerationConfig

    s = cfg.sampling
    eos = sorted(target.eos_ids) or None
    pad = tok.pad_token_id if tok.pad_token_id is not None else (eos[0] if eos else 0)
    kw = dict(max_new_tokens=cfg.max_new_tokens, min_length=0, num_beams=1, do_sample=not s.greedy, use_cache=True,
              eos_token_id=eos, pad_token_id=pad, repetition_penalty=1.0, no_repeat_ngram_size=0,
              encoder_repetition_penalty=1.0, typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0,
              bad_words_ids=None, suppress_tokens=None, begin_suppress_tokens=None, forced_bos_token_id=None,
              forced_eos_token_id=None, renormalize_logits=False, remove_invalid_values=False)
    if not s.greedy:
        kw.update(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)
    if pld:
        kw.update(prompt_lookup_num_tokens=PLD_TOKENS)
    return GenerationConfig(**kw)


def trim_at_eos(tokens: list[int], eos_ids: frozenset[int]) -> tuple[int, ...]:
    """Tokens up to and including the first EOS (our decoders' stopping rule)."""
    for i, t in enumerate(tokens):
        if t in eos_ids:
            return tuple(tokens[: i + 1])
    return tuple(tokens)


def hf_runner(target: TargetModel, gen_cfg, greedy: bool) -> tuple[Runner, Digest]:
    """target.model.generate() with a forward hook counting target passes (hf: one per token; PLD: per verify)."""
    model = target.model

    def run(ids: list[int], seed: int):
        x = torch.tensor([ids], device=target.device)  # (1, P)
        count = [0]
        hook = model.register_forward_hook(lambda *_: count.__setitem__(0, count[0] + 1))
        try:
            if not greedy:
                torch.manual_seed(seed)
            with torch.inference_mode():
                out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), generation_config=gen_cfg)
        finally:
            hook.remove()
        return out, len(ids), count[0]

    plain = getattr(gen_cfg, "prompt_lookup_num_tokens", None) is None  # one token per forward

    def digest(raw, seconds: float) -> Outcome:
        out, n_prompt, forwards = raw
        tokens = trim_at_eos(out[0, n_prompt:].tolist(), target.eos_ids)
        return Outcome(tokens, seconds, forwards, step_tokens=(1,) * len(tokens) if plain else None)

    return run, digest


def hf_scorer(target: TargetModel, gen_cfg) -> Scorer:
    """generate() again, greedy and untimed, for the timed run's first len(tokens) tokens with output_logits: their
    top-2 margins and top-1 logits.

    Only called for a row that differs from baseline (see the module docstring); ([], []) if the rerun's tokens are
    not the timed run's (then the divergence stays unexplained).
    """

    def score(ids: list[int], tokens: tuple[int, ...]) -> tuple[list[float], list[float]]:
        cfg = copy.deepcopy(gen_cfg)
        cfg.update(max_new_tokens=len(tokens), output_logits=True, return_dict_in_generate=True)
        x = torch.tensor([ids], device=target.device)  # (1, P)
        with torch.inference_mode():
            out = target.model.generate(input_ids=x, attention_mask=torch.ones_like(x), generation_config=cfg)
        if tuple(out.sequences[0, len(ids):].tolist()) != tuple(tokens):
            return [], []
        return top2(torch.cat(list(out.logits), dim=0))  # (n, V): one row per generated token, before processors

    return score


@dataclass(frozen=True)
class Peer:
    """A decoder outside our engine: its (timed runner, digest) and its margin scorer (None: it has none), each
    built from the loaded target, its tokenizer and the run's decode settings."""

    runner: Callable[[TargetModel, Any, DecodeConfig], tuple[Runner, Digest]]
    scorer: Callable[[TargetModel, Any, DecodeConfig], Scorer] | None = None


def hf_peer(pld: bool) -> Peer:
    """transformers' generate(), plain or with prompt lookup."""
    return Peer(lambda target, tok, cfg: hf_runner(target, hf_generation_config(target, tok, cfg, pld),
                                                   cfg.sampling.greedy),
                lambda target, tok, cfg: hf_scorer(target, hf_generation_config(target, tok, cfg, pld)))


# Method name -> peer, in the order the methods' help lists them. A new external peer is one more line here.
PEERS: dict[str, Peer] = {
    "hf": hf_peer(False),
    "hf-pld": hf_peer(True),
}

# Method name -> the peer of one file; each file races as its own row (core/bench/plan.py `Plan.files`).
FILE_PEERS: dict[str, Callable[[str], Peer]] = {
    llamacpp.METHOD: lambda path: Peer(llamacpp.runner_for(path)),  # --gguf FILE: llama.cpp, plain greedy
}


def peer_of(row: str, files: Iterable[tuple[str, str, str]]) -> Peer:
    """The peer that runs a row: its `PEERS` entry, or the `FILE_PEERS` peer of the (row, method, path) naming it."""
    if row in PEERS:
        return PEERS[row]
    method, path = next((m, p) for r, m, p in files if r == row)
    return FILE_PEERS[method](path)
