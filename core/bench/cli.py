"""Spec-Bench-style speed benchmark: transformers generate() (plain, prompt lookup) vs our baseline and EAGLE-2.

python -m core.bench --questions FILE.jsonl [--categories a,b] [--limit N] [--per-category N [--file-categories]]
    --max-new-tokens M
    --methods hf,hf-pld,baseline,eagle2[,eagle2-head,eagle2-chain,lookup,medusa] [--temperature T] [--model M --head H]
    [--tree auto|T,D,K[,L[,S]]] [--head-tree T,D,K[,L[,S]]] [--head-b H2 [--head-tree-b T,D,K[,L[,S]]]] [--medusa-head M]
    [--dtype fp32|bf16] [--device D] [--threads N] [--raw] --json OUT [--html OUT] [--seed S] [--repeats R]
    [--turns 2] [--specbench-dir DIR]

With --turns 2, each question's second turn is then asked the same way, as the second turn of a conversation that
holds the baseline's answer to the first (core/bench/turns.py); rows carry `turn`, and `summary_by_turn` has each
turn's figures. --specbench-dir also writes Spec-Bench's per-method answer files (core/bench/specbench.py); rows carry
token_ids and accept_lengths (tokens per target forward) for them, and vLLM's metric names beside ours.

Protocol (docs/ARCHITECTURE.md §5): batch 1, the first turn of each question as the prompt, one uncounted warm-up
generation per method on the first prompt, then per prompt every method back to back in rotating order (prompt i
starts with method i mod M) so machine drift hits all alike. Every method is timed the same way: perf_counter (after
a CUDA synchronize) around the whole call, i.e. around consuming our decoders' generators, not the sum of step_ms.
Speedup = ratio of mean tokens/s (core.bench.report); tau = sum of new tokens / sum of target forwards, counted for
generate() with a forward hook. At temperature 0 each method's tokens are compared with `baseline`'s, and a row
that differs carries `divergence`: the first differing index, both runs' top-2 logit margins there and whether the
dtype's rounding explains it (core/engine/exactness.py); the summary counts `mismatches` and `unexplained_mismatches`.
For a head with a reduced draft vocabulary, each row also counts the output tokens inside it (`in_draft_vocab`): a
token outside can never be drafted, so the pooled share per category bounds what the head alone can reach.
Our decoders record margins while decoding. generate()'s are read from its own logits (`output_logits`) in a second,
untimed call cut at the divergence, made only for rows that differ: asking for logits in the timed call would copy
a 262k-vocabulary row per token into the measured time, and a teacher-forced forward would round differently from
the one-token steps that chose the tokens.

Our methods: eagle2 = the engine as configured: the head's dynamic tree plus the context-lookup chain, or what
`--tree auto` chose; eagle2-head = the same tree (or --head-tree's) without lookup (the head alone); eagle2-chain = the head as a single
chain (top_k 1, no lookup, depth 6 or the tree's if deeper); lookup = the lookup chain alone, no head (our engine's
prompt lookup, next to transformers' hf-pld). eagle2-head-b / eagle2-chain-b = eagle2-head / eagle2-chain with the
head given by --head-b, so two heads (e.g. EAGLE-3 and EAGLE-1/2 trained on the same data) race in one run;
--head-tree-b gives eagle2-head-b its own tree, so one head (--head-b = --head) races itself at two trees, e.g. a
fixed depth against dynamic depth (S = TreeConfig.stop_below: no level below one whose best guess is under S).
eagle2-greedy-tree = eagle2 with the tree `auto` plans from a greedy calibration, for sampled runs: next to eagle2
(whose `auto` calibrates at the run's own temperature) it shows what planning per sampling regime buys.
medusa = the Medusa head (--medusa-head, or the one shipped for the default model) through the same loop with
eagle2-head's tree (token-level drafting at the same budget as the feature-level head alone).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

from core.bench.report import (  # noqa: F401  (re-exported: the pure arithmetic lives there)
    acceptance_table, category_table, honest_table, mean_tokens_per_s, pooled_tau, spec_bench_speedup, step_table,
    summarize_rows, summary_table, vocab_table, write_html,
)
from core.models import choices
from core import pipeline, prompt
from core.cli import fail
from core.lanes import SPECIAL_HEADS, LaneSpec, build_lane
from core.engine.autotree import choose_tree, describe
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig

from core.engine.exactness import classify, first_difference
from core.models.kernels import cpu_description
from core.engine.loops import loop_period
from core.engine.metrics_names import serving_names
from core.engine.timing import now
from core.bench.plan import Plan
from core.bench.questions import (  # noqa: F401  (re-exported)
    SPLITS, BenchError, read_questions, select_questions, split_questions,
)
from core.bench.specbench import write_specbench
from core.bench.turns import check_turns, rows_of_turn, second_turns
from core.bench.runners import (  # noqa: F401  (re-exported: tests and scripts import them from here)
    PLD_TOKENS, Digest, Outcome, Runner, Scorer, chain_tree, core_runner, hf_generation_config, hf_runner, hf_scorer,
    make_runners, make_scorers, timed, trim_at_eos, uses_run_tree,
)

METHODS = ("hf", "hf-pld", "baseline", "eagle2", "eagle2-head", "eagle2-chain", "lookup", "eagle2-head-b",
           "eagle2-chain-b", "eagle2-greedy-tree", "medusa")
EAGLE_METHODS = ("eagle2", "eagle2-head", "eagle2-chain", "lookup", "eagle2-head-b", "eagle2-chain-b",
                 "eagle2-greedy-tree", "medusa")  # methods run by our EAGLE-2 loop (tree statistics per row)
B_METHODS = ("eagle2-head-b", "eagle2-chain-b")  # the same variants with --head-b (two heads, one interleaved run)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line instead of usage + message
        raise BenchError(message)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = _Parser(prog="python -m core.bench", description=__doc__.split("\n")[0])
    p.add_argument("--questions", default=os.environ.get("EAGLE_QUESTIONS"),
                   help="Spec-Bench style jsonl (question_id, category, turns); default $EAGLE_QUESTIONS")
    p.add_argument("--categories", default="", help="comma list of Spec-Bench categories (or MT-bench ones)")
    p.add_argument("--per-category", type=int, default=0, help="first N rows per category in file order")
    p.add_argument("--file-categories", action="store_true",
                   help="group by the file's own categories (MT-bench's eight) instead of Spec-Bench's six")
    p.add_argument("--limit", type=int, default=0, help="cap on the number of prompts")
    p.add_argument("--split", default="all", choices=SPLITS,
                   help="dev: question_id %% 5 == 0, for training decisions; test: the rest, for published results; "
                        "all: every row (default; runs before the split existed)")
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument("--methods", default="hf,baseline,eagle2", help="comma list of " + ",".join(METHODS))
    p.add_argument("--lane", action="append", default=[], metavar="NAME=HEAD@TREE",
                   help="an extra lane, repeatable: HEAD = baseline | head (the run's --head) | lookup | a head folder; "
                        "TREE = T,D,K[,L[,S]] (left out: the run's tree). Methods are shorthands for lanes "
                        "(core/lanes.py)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--model", default=None, help="target model name, folder or hub id (default qwen2.5-coder-0.5b-instruct)")
    p.add_argument("--head", default=None, help="EAGLE head folder (default: the pipeline's default head)")
    p.add_argument("--head-b", default=None, help="a second head folder for eagle2-head-b / eagle2-chain-b")
    p.add_argument("--medusa-head", default=None,
                   help="Medusa head folder for the method medusa (default: the one shipped for the default model)")
    p.add_argument("--tree", default="auto",
                   help="'auto' or total_tokens,depth,top_k[,lookup[,stop_below]] (e.g. 24,6,6 or 24,6,6,0; "
                        "16,6,8,0,0.1 adds dynamic depth)")
    p.add_argument("--head-tree", default=None,
                   help="total_tokens,depth,top_k for the head-alone methods (eagle2-head, eagle2-head-b, medusa; lookup "
                        "is always 0 there), so eagle2 can run at 'auto' while the heads are compared at a fixed "
                        "tree (default: the run's tree); a fifth field sets dynamic depth (stop_below)")
    p.add_argument("--head-tree-b", default=None,
                   help="the head-alone tree of eagle2-head-b (default: --head-tree's), so one head can race itself "
                        "at two trees (e.g. fixed against dynamic depth) in one interleaved run")
    p.add_argument("--dtype", default=None,
                   help="fp32 | bf16 | fp16 | auto (default auto: on CPU the faster of bf16 and fp32 here)")
    p.add_argument("--device", default=None, help="cuda | mps | cpu (default: best available)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--raw", action="store_true", help="feed raw text even when the tokenizer has a chat template")
    p.add_argument("--turns", type=int, default=1,
                   help="2: also ask each question's second turn, as the second turn of a conversation holding the "
                        "baseline's first answer (MT-bench as Spec-Bench and EAGLE run it; needs the method baseline)")
    p.add_argument("--specbench-dir", default=None,
                   help="also write Spec-Bench's per-method answer files (<model>-<method>-<dtype>-temp-<T>.jsonl) "
                        "here, for its evaluation/speed.py and equal.py")
    p.add_argument("--json", required=True, help="where to write the results")
    p.add_argument("--html", default=None, help="optional standalone HTML report")
    p.add_argument("--seed", type=int, default=0, help="sampling seed base (prompt seed = seed + question_id)")
    p.add_argument("--repeats", type=int, default=1,
                   help="rounds per prompt, each method's fastest kept (2+ steadies per-category ratios on a busy box)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own code (off by default)")
    p.add_argument("--choices", default=None, metavar="FILE",
                   help="pin dtype and kernel routes from FILE, or write this run's there when it does not exist "
                        "(core/models/choices.py; also $EAGLE_CHOICES)")
    p.add_argument("--attention", default=None, choices=["auto", "invariant", "sdpa"],
                   help="the target's attention: sdpa (default; $EAGLE_ATTENTION), invariant or auto (docs/trust.md)")
    return p.parse_args(argv)


def validate(a: argparse.Namespace) -> Plan:
    """Check arguments at the boundary; raise BenchError / ValueError with a one-line message."""
    methods = tuple(m.strip() for m in a.methods.split(",") if m.strip())
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise BenchError(f"unknown method(s) {unknown or a.methods!r}; choose from {','.join(METHODS)}")
    if len(set(methods)) != len(methods):
        raise BenchError(f"duplicate method in {a.methods!r}")
    lanes = tuple(LaneSpec.parse(s) for s in getattr(a, "lane", []))
    taken = [n for n in (ln.name for ln in lanes) if n in METHODS or [ln.name for ln in lanes].count(n) > 1]
    if taken:
        raise BenchError(f"--lane name {taken[0]!r} is a method name or given twice")
    for ln in lanes:
        if ln.head not in SPECIAL_HEADS:
            pipeline.check_head_path(ln.head)
    methods += tuple(ln.name for ln in lanes)
    if "eagle2-greedy-tree" in methods and a.tree != "auto":
        raise BenchError("eagle2-greedy-tree compares auto's greedy plan with eagle2's: it needs --tree auto")
    if any(m in B_METHODS for m in methods) != bool(getattr(a, "head_b", None)):
        raise BenchError("--head-b and the methods eagle2-head-b / eagle2-chain-b go together")
    if getattr(a, "head_b", None):
        pipeline.check_head_path(a.head_b)
    if getattr(a, "head_tree_b", None) and "eagle2-head-b" not in methods:
        raise BenchError("--head-tree-b is the tree of eagle2-head-b: add that method (and --head-b)")
    if getattr(a, "medusa_head", None):
        pipeline.check_head_path(a.medusa_head)
    if "medusa" in methods and not (getattr(a, "medusa_head", None) or pipeline.default_medusa_head(a.model)):
        raise BenchError("method medusa needs --medusa-head (no Medusa head is shipped for this model)")
    if a.per_category < 0 or a.limit < 0 or a.threads < 0:
        raise BenchError("--per-category, --limit and --threads must be >= 0")
    if a.max_new_tokens < 1:
        raise BenchError(f"--max-new-tokens must be >= 1, got {a.max_new_tokens}")
    if a.repeats < 1:
        raise BenchError(f"--repeats must be >= 1, got {a.repeats}")
    if not a.questions:
        raise BenchError("no questions file: give --questions FILE.jsonl or set EAGLE_QUESTIONS (docs/usage.md)")
    check_turns(getattr(a, "turns", 1), methods, a.raw)
    if not Path(a.questions).is_file():
        raise BenchError(f"questions file {a.questions!r} not found")
    tree = None if a.tree == "auto" else TreeConfig.parse(a.tree)
    head_tree = TreeConfig.parse(a.head_tree) if getattr(a, "head_tree", None) else None
    head_tree_b = TreeConfig.parse(a.head_tree_b) if getattr(a, "head_tree_b", None) else None
    sampling = SamplingConfig(temperature=a.temperature, seed=a.seed)
    decode = DecodeConfig(max_new_tokens=a.max_new_tokens, sampling=sampling, tree=tree or TreeConfig())
    cats = frozenset(c.strip() for c in a.categories.split(",") if c.strip())
    return Plan(methods, cats, tree, head_tree, decode, head_tree_b, lanes)


# ------------------------------------------------------------------------------------------------ loading


def load_stack(model: str | None, head: str | None, device: str | None, dtype: str | None,
               trust_remote_code: bool = False, attention: str | None = None):
    """(target, tokenizer, baseline, eagle, loader name) from core.pipeline.build_decoders, as the app loads them."""
    return (*pipeline.build_decoders(model, head, device, dtype, trust_remote_code=trust_remote_code,
                                     attention=attention),
            "core.pipeline.build_decoders")


# `--tree auto` calibrates on this held-out prompt, never on a measured one (a tree planned on a prompt and then
# measured on it would flatter that prompt); it is in neither Spec-Bench nor MT-bench.
CALIBRATION_PROMPT = "Explain how the gears on a bicycle make it easier to ride up a steep hill."


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


def divergence_record(reference: Outcome, o: Outcome, dtype: torch.dtype | str) -> dict:
    """{"index", "baseline_margin", "method_margin", "near_tie", "tolerance"} of a row that differs from baseline.

    Outputs that differ only in length (one a prefix of the other) have no differing token to explain: near_tie
    False, margins None.
    """
    d = classify(reference.tokens, o.tokens, reference.margins, o.margins, reference.top_logits, o.top_logits, dtype)
    if d is None:
        return {"index": min(len(o.tokens), len(reference.tokens)), "baseline_margin": None, "method_margin": None,
                "near_tie": False, "tolerance": None}
    return {k: v for k, v in d.as_dict().items() if k != "label"}


def draft_vocab_masks(methods: tuple[str, ...], eagle=None, eagle_b=None, medusa=None,
                      lanes: dict | None = None) -> dict[str, torch.Tensor]:
    """Method -> (V,) bool CPU mask of the target ids its head can draft, for methods whose head drafts over a reduced
    vocabulary (EAGLE-1/2 `--draft-vocab` or a folder's draft_vocab.json, EAGLE-3's d2t); methods drafting over the
    full vocabulary are absent."""
    decoder = {m: eagle for m in ("eagle2", "eagle2-head", "eagle2-chain", "eagle2-greedy-tree")}
    decoder.update({m: eagle_b for m in B_METHODS}, medusa=medusa)
    decoder.update({n: lane.decoder for n, lane in (lanes or {}).items()})
    out = {}
    for m in methods:
        drafter = getattr(decoder.get(m), "drafter", None)
        ids = getattr(drafter, "vocab_ids", None)
        if ids is not None:
            mask = torch.zeros(drafter.target.vocab_size, dtype=torch.bool)
            mask[ids.cpu()] = True
            out[m] = mask
    return out


def make_row(q: dict, method: str, o: Outcome, reference: Outcome | None, dtype: torch.dtype | str = "float32",
             vocab: torch.Tensor | None = None) -> dict:
    """One per_prompt row; `reference` = baseline's outcome when compared (T = 0), else None; `vocab` = the (V,)
    bool mask of the method head's reduced draft vocabulary, if it has one."""
    n = len(o.tokens)
    same = None if reference is None else o.tokens == reference.tokens
    first_diff = None
    if same is False:
        first_diff = first_difference(o.tokens, reference.tokens)
        first_diff = min(n, len(reference.tokens)) if first_diff is None else first_diff
    row = {"question_id": q["question_id"], "turn": q.get("turn", 1), "category": q["group"], "method": method,
           "new_tokens": n, "token_ids": list(o.tokens),
           "accept_lengths": None if o.step_tokens is None else list(o.step_tokens),
           "seconds": o.seconds, "tokens_per_s": n / o.seconds if o.seconds > 0 else 0.0,
           "target_forwards": o.target_forwards, "tau": n / o.target_forwards if o.target_forwards else None,
           "identical_to_baseline": same, "first_mismatch": first_diff, "loop_period": loop_period(o.tokens)}
    if same is False:
        row["divergence"] = divergence_record(reference, o, dtype)
    if vocab is not None:
        row["in_draft_vocab"] = int(vocab[torch.tensor(o.tokens, dtype=torch.long)].sum()) if n else 0
    if o.stats is not None:  # our decoders: mean ms per decode step (prefill excluded), split by what it ran
        verify, draft, other = o.stats.step_split_ms
        row["step_ms"] = {"target": verify, "draft": draft, "other": other, "steps": o.stats.target_forwards - 1}
    if (method in EAGLE_METHODS or o.drafted) and o.stats is not None:
        row.update(steps=o.stats.steps, accepted_drafts=o.stats.accepted_drafts, drafted_tokens=o.stats.drafted_tokens,
                   accept_rate=o.stats.accept_rate, accept_hist=list(o.stats.accept_hist),
                   depth_accept=list(o.stats.depth_accept), accepted_lookup=o.stats.accepted_lookup,
                   accepted_head=o.stats.accepted_head)
        row.update(serving_names(row))  # vLLM's names beside ours (core/engine/metrics_names.py)
    return row


def prompt_rows(q: dict, outcomes: dict[str, Outcome], methods: tuple[str, ...], compare: bool,
                dtype: torch.dtype | str = "float32", vocabs: dict[str, torch.Tensor] | None = None) -> list[dict]:
    """Rows of one prompt in method order; compared with baseline when `compare` and baseline ran."""
    ref = outcomes["baseline"] if compare and "baseline" in outcomes else None
    return [make_row(q, m, outcomes[m], ref, dtype, (vocabs or {}).get(m)) for m in methods]


def score_divergences(outcomes: dict[str, Outcome], ids: list[int], scorers: dict[str, Scorer]) -> dict[str, Outcome]:
    """Fill in generate()'s margins, up to the first differing token, for the methods that differ from baseline."""
    ref = outcomes.get("baseline")
    out = dict(outcomes)
    for m, score in scorers.items():
        o = outcomes.get(m)
        i = None if ref is None or o is None else first_difference(ref.tokens, o.tokens)
        if i is not None:
            margins, tops = score(ids, o.tokens[:i + 1])
            out[m] = replace(o, margins=tuple(margins), top_logits=tuple(tops))
    return out


def rotation(methods: tuple[str, ...], i: int) -> tuple[str, ...]:
    """Prompt i runs the methods starting with method i mod M."""
    k = i % len(methods)
    return methods[k:] + methods[:k]


def run_bench(questions: list[dict], prompts: list[list[int]], runners: dict, methods: tuple[str, ...],
              device: torch.device, seed: int, compare: bool, progress=None, scorers: dict[str, Scorer] | None = None,
              dtype: torch.dtype | str = "float32", repeats: int = 1,
              vocabs: dict[str, torch.Tensor] | None = None) -> list[dict]:
    """Warm up each method once on the first prompt, then run every prompt with rotating method order, `repeats`
    rounds per prompt (each round starts one method later), keeping each method's fastest round: a burst of other
    work on a shared machine then costs a round, not the comparison. The same seed gives the same tokens each round."""
    for m in methods:
        timed(*runners[m], prompts[0], seed + questions[0]["question_id"], device)
    rows: list[dict] = []
    for i, (q, ids) in enumerate(zip(questions, prompts)):
        outcomes: dict[str, Outcome] = {}
        for r in range(repeats):
            for m in rotation(methods, i + r):
                o = timed(*runners[m], ids, seed + q["question_id"], device)
                if m not in outcomes or o.seconds < outcomes[m].seconds:
                    outcomes[m] = o
        outcomes = {m: outcomes[m] for m in rotation(methods, i)}
        if compare and scorers:
            outcomes = score_divergences(outcomes, ids, scorers)
        rows += prompt_rows(q, outcomes, methods, compare, dtype, vocabs)
        if progress:
            progress(rows)
    return rows


# ------------------------------------------------------------------------------------------------ wiring


def machine_config(a: argparse.Namespace, plan: Plan, target, tree: TreeConfig, tree_info: dict, loader: str,
                   n_prompts: int, eagle=None) -> dict:
    """The `config` block of the JSON: machine, software, model and protocol settings."""
    import transformers

    chain = chain_tree(tree)
    return {
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu": cpu_description(), "cpu_count": os.cpu_count()},
        "torch": torch.__version__, "transformers": transformers.__version__, "torch_threads": torch.get_num_threads(),
        "dtype": str(target.dtype).removeprefix("torch."), "device": str(target.device),
        "dtype_timing_ms": target.dtype_timing, "kernels": target.kernel_choices(), "model": target.name,
        "choices": choices.describe(target, getattr(eagle, "drafter", None)),
        "loader": loader,
        "tree": {"spec": a.tree, **asdict(tree), **tree_info},
        "chain_tree": asdict(chain) if "eagle2-chain" in plan.methods else None,
        "head_tree": asdict(replace(plan.head_tree or tree, lookup=0)) if "eagle2-head" in plan.methods else None,
        "head_tree_b": asdict(replace(plan.head_tree_b or plan.head_tree or tree, lookup=0))
        if "eagle2-head-b" in plan.methods else None,
        "methods": list(plan.methods),
        "lanes": {s.name: {"head": s.head, "tree": asdict(s.tree) if s.tree else None} for s in plan.lanes} or None,
        "temperature": plan.decode.sampling.temperature,
        "top_p": plan.decode.sampling.top_p, "top_k": plan.decode.sampling.top_k, "seed": a.seed,
        "max_new_tokens": plan.decode.max_new_tokens, "questions": a.questions,
        "categories": sorted(plan.categories) or "all", "per_category": a.per_category, "limit": a.limit,
        "split": getattr(a, "split", "all"),
        "file_categories": a.file_categories,
        "n_prompts": n_prompts, "prompt_format": "raw" if a.raw else "chat template when the tokenizer has one",
        "hf_pld_tokens": PLD_TOKENS if "hf-pld" in plan.methods else None,
        "protocol": "1 warm-up per method; rotating method order; speedup = ratio of mean tok/s; "
                    "tau = Σ new tokens / Σ target forwards",
        "repeats": a.repeats,  # rounds per prompt, fastest kept
        "turns": getattr(a, "turns", 1),  # 2: second turns asked on the baseline's first answers (core/bench/turns.py)
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def _progress_bar(total: int, methods: tuple[str, ...]):
    from tqdm import tqdm

    bar = tqdm(total=total, desc="prompts", unit="prompt", file=sys.stderr, dynamic_ncols=True)
    ref = "hf" if "hf" in methods else "baseline"
    shown = "eagle2" if "eagle2" in methods else None

    def update(rows: list[dict]) -> None:
        if shown and ref in methods and shown != ref:
            s = spec_bench_speedup(rows, shown, ref)
            bar.set_postfix_str(f"{shown} vs {ref} {s:.2f}x" if s else "")
        bar.update(1)

    return bar, update


def bench(a: argparse.Namespace, plan: Plan) -> dict:
    """Load, select, run, summarize: the whole benchmark as one JSON-ready dict."""
    questions = select_questions(split_questions(read_questions(a.questions), getattr(a, "split", "all")),
                                 plan.categories, a.per_category, a.limit, a.file_categories)
    if not questions:
        raise BenchError("no questions selected")
    torch.manual_seed(a.seed)
    if getattr(a, "choices", None):
        choices.use(a.choices)
    if a.threads:
        torch.set_num_threads(a.threads)
    target, tok, baseline, eagle, loader = load_stack(a.model, a.head, a.device, a.dtype,
                                                      getattr(a, "trust_remote_code", False),
                                                      getattr(a, "attention", None))
    prompts = [prompt.encode_prompt(tok, q["turns"][0], "raw" if a.raw else "auto") for q in questions]
    calibration_ids = prompt.encode_prompt(tok, CALIBRATION_PROMPT, "raw" if a.raw else "auto")
    if plan.tree is None and not uses_run_tree(plan):  # nothing drafts with auto's tree: skip its calibration
        tree, tree_info = plan.decode.tree, {"source": "unused: no method drafts with the run's tree"}
    else:
        tree, tree_info = resolve_tree(plan.tree, eagle, calibration_ids, plan.decode.sampling)
    eagle_b = None
    if getattr(a, "head_b", None):
        eagle_b = pipeline.decoder_for(a.head_b, target, "eagle2")
    greedy_tree, greedy_info = None, None
    if "eagle2-greedy-tree" in plan.methods:
        greedy_tree, greedy_info = resolve_tree(None, eagle, calibration_ids, SamplingConfig())
    medusa, medusa_path = None, None
    if "medusa" in plan.methods:
        medusa_path = getattr(a, "medusa_head", None) or pipeline.default_medusa_head(a.model)
        medusa = pipeline.decoder_for(medusa_path, target)
    lanes = {s.name: build_lane(s, target, baseline, eagle) for s in plan.lanes}
    runners = make_runners(plan, target, tok, baseline, eagle, tree, eagle_b, greedy_tree, medusa, lanes)
    compare = plan.decode.sampling.greedy and "baseline" in plan.methods
    print(f"[bench] {target.name} on {target.device} ({target.dtype}), {len(questions)} prompts, "
          f"methods {','.join(plan.methods)}, tree {tree} ({describe(tree)}; {tree_info['source']}); warming up ...",
          file=sys.stderr)
    bar, progress = _progress_bar(len(questions), plan.methods)
    try:
        rows = run_bench(questions, prompts, runners, plan.methods, target.device, a.seed, compare, progress,
                         make_scorers(plan, target, tok, tree), target.dtype, a.repeats,
                         draft_vocab_masks(plan.methods, eagle, eagle_b, medusa, lanes))
    finally:
        bar.close()
    if getattr(a, "turns", 1) == 2:  # the second turns, on conversations holding the baseline's first answers
        questions2, prompts2 = second_turns(questions, rows, tok)
        if questions2:
            bar, progress = _progress_bar(len(questions2), plan.methods)
            try:
                rows += run_bench(questions2, prompts2, runners, plan.methods, target.device, a.seed, compare,
                                  progress, make_scorers(plan, target, tok, tree), target.dtype, a.repeats,
                                  draft_vocab_masks(plan.methods, eagle, eagle_b, medusa))
            finally:
                bar.close()
    if getattr(a, "specbench_dir", None):
        files, skipped = write_specbench(a.specbench_dir, questions, rows, tok, target.name,
                                         str(target.dtype).removeprefix("torch."), plan.decode.sampling.temperature)
        print(f"[bench] Spec-Bench answer files: {', '.join(str(f) for f in files)}"
              + (f" (not written, no per-step lengths: {', '.join(skipped)})" if skipped else ""), file=sys.stderr)
    head_trained = eagle.drafter.trained
    config = machine_config(a, plan, target, tree, tree_info, loader, len(questions), eagle)
    if a.head:
        head = a.head
    elif head_trained:
        head = f"shipped for the model: {pipeline.default_head(a.model)}"
    else:
        head = "none: untrained random head"
    if greedy_tree is not None:
        config["greedy_tree"] = {**asdict(greedy_tree), **greedy_info}
    return {"config": {**config, "head": head, "head_trained": head_trained, "head_b": getattr(a, "head_b", None),
                       "medusa_head": str(medusa_path) if medusa_path else None},
            "per_prompt": rows, "summary": summarize_rows(rows),
            **({"summary_by_turn": {str(t): summarize_rows(rows_of_turn(rows, t)) for t in (1, 2)
                                    if rows_of_turn(rows, t)}} if getattr(a, "turns", 1) == 2 else {})}


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (0 ok, 2 user error with one line on stderr)."""
    try:
        a = parse_args(argv)
        plan = validate(a)
        result = bench(a, plan)
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
        if a.html:
            Path(a.html).parent.mkdir(parents=True, exist_ok=True)
            c = result["config"]
            title = f"EAGLE Playground bench: {c['model']} · {c['device']} · {c['dtype']} · T={c['temperature']}"
            write_html(a.html, result["per_prompt"], result["summary"], title)
    except (BenchError, ValueError, OSError) as e:
        return fail("core.bench", e)
    print(summary_table(result["summary"]))
    print()
    print(honest_table(result["summary"]))
    print()
    for turn, summary in result.get("summary_by_turn", {}).items():
        print(f"turn {turn} only:")
        print(summary_table(summary))
        print(honest_table(summary))
        print()
    print(category_table(result["summary"]))
    print()
    print(acceptance_table(result["summary"]))
    print()
    if vocab_table(result["summary"]):
        print(vocab_table(result["summary"]))
        print()
    print(step_table(result["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
