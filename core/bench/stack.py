"""A run's loaded side, built from its Plan: the target, the run's trees, its lanes, and per method the timed runner,
margin scorer and draft vocabulary the protocol reads (core/bench/protocol.py).

The peers' runners come from core/bench/peers.py (`PEERS`, and `FILE_PEERS` per file), every other method's from its lane (core/lanes.py): one
table, built once, serves every turn.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core import pipeline, prompt
from core.bench.methods import uses_run_tree
from core.bench.peers import peer_of
from core.bench.plan import Plan
from core.bench.runners import Digest, Runner, Scorer, core_runner
from core.engine.autotree import choose_tree, describe
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
from core.lanes import Lane, build_lane
from core.models import choices

# `--tree auto` calibrates on this held-out prompt, never on a measured one (a tree planned on a prompt and then
# measured on it would flatter that prompt); it is in neither Spec-Bench nor MT-bench.
CALIBRATION_PROMPT = "Explain how the gears on a bicycle make it easier to ride up a steep hill."


@dataclass(frozen=True)
class Stack:
    """What a plan loaded: `trees` by name ("run", and "greedy" where a lane drafts with auto's greedy plan) with
    how each was chosen (`tree_info`), the lanes by name, and per method its runner, scorer (peers that have one)
    and draft-vocabulary mask (lanes whose head drafts over a reduced vocabulary)."""

    target: Any
    tok: Any
    eagle: Any  # the --head decoder: its drafter is what the JSON describes
    loader: str
    trees: dict[str, TreeConfig]
    tree_info: dict[str, dict]
    lanes: dict[str, Lane]
    runners: dict[str, tuple[Runner, Digest]]
    scorers: dict[str, Scorer]
    vocabs: dict[str, torch.Tensor]


def load_stack(model: str | None, head: str | None, device: str | None, dtype: str | None,
               trust_remote_code: bool = False, attention: str | None = None):
    """(target, tokenizer, baseline, eagle, loader name) from core.pipeline.build_decoders, as the app loads them."""
    return (*pipeline.build_decoders(model, head, device, dtype, trust_remote_code=trust_remote_code,
                                     attention=attention),
            "core.pipeline.build_decoders")


def resolve_tree(given: TreeConfig | None, eagle, prompt_ids: list[int],
                 sampling: SamplingConfig | None = None) -> tuple[TreeConfig, dict]:
    """The tree to use and how it was chosen; 'auto' (given None) asks core.engine.autotree.choose_tree, calibrating
    at the run's own sampling settings on `prompt_ids` (the bench passes CALIBRATION_PROMPT's ids)."""
    if given is not None:
        return given, {"source": "given"}
    report = choose_tree(eagle, prompt_ids, sampling=sampling)
    return report.chosen, {"source": "auto: core.engine.autotree.choose_tree on the held-out calibration prompt, at "
                                     "the run's sampling", "calibration_prompt": CALIBRATION_PROMPT,
                           "plan": describe(report.chosen),
                           "verify_ms": report.verify_ms, "expected_tokens": report.expected_tokens,
                           "draft_ms": report.draft_ms, "calibration": report.calibration}


def plan_trees(plan: Plan, eagle, tok) -> tuple[dict[str, TreeConfig], dict[str, dict]]:
    """The run's trees and how each was chosen: "run" (--tree, or what `auto` plans at the run's sampling, skipped
    when no lane drafts with it) and "greedy" (auto's plan from a greedy calibration) where a lane asks for it."""
    ids = prompt.encode_prompt(tok, CALIBRATION_PROMPT, "raw" if plan.raw else "auto")
    if plan.tree is None and not uses_run_tree(plan.lanes):  # nothing drafts with auto's tree: skip its calibration
        trees, info = {"run": plan.decode.tree}, {"run": {"source": "unused: no method drafts with the run's tree"}}
    else:
        tree, how = resolve_tree(plan.tree, eagle, ids, plan.decode.sampling)
        trees, info = {"run": tree}, {"run": how}
    if any(s.rule == "greedy" for s in plan.lanes):
        trees["greedy"], info["greedy"] = resolve_tree(None, eagle, ids, SamplingConfig())
    return trees, info


def draft_vocab_mask(decoder) -> torch.Tensor | None:
    """(V,) bool CPU mask of the target ids the decoder's head can draft, when it drafts over a reduced vocabulary
    (EAGLE-1/2 `--draft-vocab` or a folder's draft_vocab.json, EAGLE-3's d2t); None over the full vocabulary."""
    drafter = getattr(decoder, "drafter", None)
    ids = getattr(drafter, "vocab_ids", None)
    if ids is None:
        return None
    mask = torch.zeros(drafter.target.vocab_size, dtype=torch.bool)
    mask[ids.cpu()] = True
    return mask


def prepare(plan: Plan) -> Stack:
    """Seed, pin the choices, load the target and --head, plan the trees, build the lanes (each head folder read
    once) and the per-method tables."""
    torch.manual_seed(plan.seed)
    ld = plan.loading
    if ld.choices:
        choices.use(ld.choices)
    if ld.threads:
        torch.set_num_threads(ld.threads)
    target, tok, baseline, eagle, loader = load_stack(ld.model, ld.head, ld.device, ld.dtype, ld.trust_remote_code,
                                                      ld.attention)
    trees, tree_info = plan_trees(plan, eagle, tok)
    built: dict[str, Any] = {}
    lanes = {s.name: build_lane(s, target, baseline, eagle, trees, built) for s in plan.lanes}
    cfg = DecodeConfig(plan.decode.max_new_tokens, plan.decode.sampling, trees["run"])
    peers = {m: peer_of(m, plan.files) for m in plan.peers}
    runners = {m: peer.runner(target, tok, cfg) for m, peer in peers.items()}
    runners.update({name: core_runner(lane.decoder, lane.config(cfg)) for name, lane in lanes.items()})
    scorers = {m: peer.scorer(target, tok, cfg) for m, peer in peers.items() if peer.scorer is not None}
    masks = {name: draft_vocab_mask(lane.decoder) for name, lane in lanes.items()}
    return Stack(target, tok, eagle, loader, trees, tree_info, lanes, runners, scorers,
                 {name: mask for name, mask in masks.items() if mask is not None})
