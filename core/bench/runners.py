"""Benchmark runners: each method as a (timed runner, digest) pair, and the one timing function they all go through.

transformers' generate() (plain and prompt lookup) and our decoders (baseline, EAGLE-2 and its variants, Medusa,
lookup) are timed the same way: perf_counter (after a CUDA synchronize) around the whole call. Digests compute
statistics outside the timed region.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, replace
from typing import Callable

import torch

from core.bench.plan import Plan
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
from core.engine.events import RunStats, summarize
from core.engine.exactness import top2
from core.models.target import TargetModel
from core.engine.timing import now

PLD_TOKENS = 10  # prompt_lookup_num_tokens, as in Spec-Bench's PLD runs


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


Runner = Callable[[list[int], int], object]  # (prompt ids, seed) -> raw output, timed as a whole
Digest = Callable[[object, float], Outcome]  # (raw output, seconds) -> Outcome, outside the timed region
Scorer = Callable[[list[int], tuple[int, ...]], tuple[list[float], list[float]]]  # (prompt, tokens) -> margins, top-1


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


def chain_tree(tree: TreeConfig) -> TreeConfig:
    """`eagle2-chain`: the head as one chain (top-k 1, no lookup), at least as deep as the engine default so n-alpha
    is measured to depth 5 even when `auto` chose a shallow tree."""
    depth = max(tree.depth, TreeConfig().depth)
    return TreeConfig(total_tokens=depth + 1, depth=depth, top_k=1, lookup=0)


# Which tree each drafting method drafts with: the run's (--tree) always, or the head-alone tree (--head-tree when
# given, else the run's). make_runners below builds the same split; eagle2-greedy-tree and lookup plan their own.
RUN_TREE_METHODS = frozenset({"eagle2", "eagle2-chain", "eagle2-chain-b"})
HEAD_TREE_METHODS = frozenset({"eagle2-head", "eagle2-head-b", "medusa"})


def uses_run_tree(plan: Plan) -> bool:
    """Whether any method drafts with the run's tree (--tree): eagle2 and the chains always, the head-alone methods
    when no --head-tree is given. Only then does `--tree auto` need its calibration (about a minute on a CPU)."""
    users = RUN_TREE_METHODS | (HEAD_TREE_METHODS if plan.head_tree is None else frozenset())
    lanes = any(ln.tree is None and ln.head != "baseline" for ln in plan.lanes)  # a lane without its own tree
    return lanes or bool(users & set(plan.methods))


def make_runners(plan: Plan, target, tok, baseline, eagle, tree: TreeConfig,
                 eagle_b=None, greedy_tree: TreeConfig | None = None, medusa=None,
                 lanes: dict | None = None) -> dict[str, tuple[Runner, Digest]]:
    """Method name -> (timed runner, digest). `eagle_b`: the decoder over --head-b, for the *-b methods;
    `greedy_tree`: auto's greedy plan, for eagle2-greedy-tree; `medusa`: the Medusa decoder, which drafts with the
    head-alone tree of eagle2-head (same budget, no lookup), so the two heads race on equal terms; `lanes`: --lane's
    `Lane`s (core/lanes.py), each timed with its own decoder and tree."""
    cfg = DecodeConfig(plan.decode.max_new_tokens, plan.decode.sampling, tree)
    variant = {"eagle2-head": replace(plan.head_tree or tree, lookup=0), "eagle2-chain": chain_tree(tree),
               "lookup": TreeConfig(total_tokens=1, depth=1, top_k=1, lookup=PLD_TOKENS),
               "eagle2-greedy-tree": greedy_tree or tree}
    variant_b = {"eagle2-head": replace(plan.head_tree_b, lookup=0)} if plan.head_tree_b else {}
    table = {
        "hf": lambda: hf_runner(target, hf_generation_config(target, tok, cfg, False), cfg.sampling.greedy),
        "hf-pld": lambda: hf_runner(target, hf_generation_config(target, tok, cfg, True), cfg.sampling.greedy),
        "baseline": lambda: core_runner(baseline, cfg),
        "eagle2": lambda: core_runner(eagle, cfg),
        **{m: (lambda t=t: core_runner(eagle, DecodeConfig(cfg.max_new_tokens, cfg.sampling, t)))
           for m, t in variant.items()},
        **{m + "-b": (lambda t=variant_b.get(m, variant[m]):
                      core_runner(eagle_b, DecodeConfig(cfg.max_new_tokens, cfg.sampling, t)))
           for m in ("eagle2-head", "eagle2-chain")},
        "medusa": lambda: core_runner(medusa, DecodeConfig(cfg.max_new_tokens, cfg.sampling, variant["eagle2-head"])),
        **{name: (lambda lane=lane: core_runner(lane.decoder, lane.config(cfg)))
           for name, lane in (lanes or {}).items()},
    }
    return {m: table[m]() for m in plan.methods}


def make_scorers(plan: Plan, target, tok, tree: TreeConfig) -> dict[str, Scorer]:
    """generate() methods -> their on-demand margin scorer (our decoders record margins while decoding)."""
    cfg = DecodeConfig(plan.decode.max_new_tokens, plan.decode.sampling, tree)
    return {m: hf_scorer(target, hf_generation_config(target, tok, cfg, m == "hf-pld"))
            for m in ("hf", "hf-pld") if m in plan.methods}


def timed(run: Runner, digest: Digest, ids: list[int], seed: int, device: torch.device) -> Outcome:
    """Wall-clock one whole generation (synchronized on CUDA), then digest it outside the timed region."""
    t0 = now(device)
    raw = run(ids, seed)
    seconds = now(device) - t0
    return digest(raw, seconds)


# ------------------------------------------------------------------------------------------------ rows


