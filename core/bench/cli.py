"""Spec-Bench-style speed benchmark: transformers generate() (plain, prompt lookup) vs our baseline and EAGLE-2.

python -m core.bench --questions FILE.jsonl [--categories a,b] [--limit N] [--per-category N [--file-categories]]
    --max-new-tokens M
    --methods hf,hf-pld,baseline,eagle2[,eagle2-head,eagle2-chain,lookup,medusa,llamacpp] [--gguf FILE.gguf ...]
    [--temperature T] [--model M --head H]
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

llamacpp = llama.cpp's plain greedy decoding of a GGUF file (llama-cpp-python, an optional extra:
requirements-extra.txt), on the same prompt ids with the same stop rules, one row per --gguf file named by its
quantisation (llamacpp-Q4_K_M, llamacpp-BF16; core/bench/llamacpp.py). A GGUF carries its own weights, so its
`identical_to_baseline` says whether that model's greedy output equals ours, and is never counted as unexplained.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from core import pipeline, prompt
from core.bench import llamacpp
from core.bench.methods import B_METHODS, METHODS, method_lanes
from core.bench.peers import PLD_TOKENS
from core.bench.plan import Loading, Plan, Selection
from core.bench.protocol import run_turn
from core.bench.questions import SPLITS, BenchError, read_questions, select_questions, split_questions
from core.bench.report import (
    acceptance_table, category_table, honest_table, step_table, summarize_rows, summary_table, vocab_table, write_html,
)
from core.bench.jsonfile import write_json
from core.bench.specbench import write_specbench
from core.bench.stack import Stack, prepare
from core.bench.turns import check_turns, rows_of_turn, second_turns
from core.cli import Parser, run
from core.engine.autotree import describe
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
from core.lanes import SPECIAL_HEADS, LaneSpec
from core.models import choices
from core.models.kernels import cpu_description


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(prog="python -m core.bench", raises=True, description=__doc__.split("\n")[0])
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
    p.add_argument("--gguf", action="append", default=[], metavar="FILE",
                   help="a GGUF file for the method llamacpp (llama.cpp's plain greedy decoding), repeatable: each "
                        "file races as its own row, llamacpp-<its quantisation>, e.g. a Q4_K_M and a BF16 file")
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
    """Check arguments at the boundary; raise BenchError / ValueError with a one-line message. Every method that is
    not a peer becomes the lane it spells (core/bench/methods.py), after --lane's own checks."""
    given = _methods(a.methods)
    files = _files(given, a.gguf, a.temperature)
    lanes = _lanes(a.lane, tuple(r for r, _, _ in files))
    methods = _rows(given, files) + tuple(ln.name for ln in lanes)
    medusa = _check_heads(a, methods)
    _check_numbers(a)
    check_turns(a.turns, methods, a.raw)
    if not Path(a.questions).is_file():
        raise BenchError(f"questions file {a.questions!r} not found")
    tree = None if a.tree == "auto" else TreeConfig.parse(a.tree)
    head_tree = TreeConfig.parse(a.head_tree) if a.head_tree else None
    head_tree_b = TreeConfig.parse(a.head_tree_b) if a.head_tree_b else None
    sampling = SamplingConfig(temperature=a.temperature, seed=a.seed)
    decode = DecodeConfig(max_new_tokens=a.max_new_tokens, sampling=sampling, tree=tree or TreeConfig())
    cats = frozenset(c.strip() for c in a.categories.split(",") if c.strip())
    shorthands = method_lanes(given, head_tree=head_tree, head_tree_b=head_tree_b, head_b=a.head_b or "",
                              medusa=medusa)
    return Plan(selection=Selection(a.questions, a.split, cats, a.per_category, a.limit, a.file_categories),
                methods=methods, lanes=shorthands + lanes, decode=decode, tree=tree, tree_spec=a.tree,
                loading=Loading(a.model, a.head, a.device, a.dtype, a.threads, a.trust_remote_code, a.choices,
                                a.attention),
                head_b=a.head_b, raw=a.raw, turns=a.turns, repeats=a.repeats, seed=a.seed, json=a.json,
                html=a.html, specbench_dir=a.specbench_dir, files=files)


def _methods(text: str) -> tuple[str, ...]:
    """--methods: known names, each once."""
    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise BenchError(f"unknown method(s) {unknown or text!r}; choose from {','.join(METHODS)}")
    if len(set(methods)) != len(methods):
        raise BenchError(f"duplicate method in {text!r}")
    return methods


def _files(given: tuple[str, ...], ggufs: list[str], temperature: float) -> tuple[tuple[str, str, str], ...]:
    """--gguf: the rows of the method llamacpp, (row, method, file) per file, with llama-cpp-python installed and
    the run greedy; --gguf without the method is refused too."""
    if llamacpp.METHOD not in given:
        if ggufs:
            raise BenchError("--gguf is a file of the method llamacpp: add llamacpp to --methods")
        return ()
    if not llamacpp.available():
        raise BenchError(llamacpp.INSTALL)
    if not ggufs:
        raise BenchError("method llamacpp needs --gguf FILE.gguf (repeatable: one row per file)")
    if temperature > 0:
        raise BenchError("method llamacpp races at temperature 0 only")
    return tuple((row, llamacpp.METHOD, path) for row, path in llamacpp.gguf_rows(ggufs))


def _rows(given: tuple[str, ...], files: tuple[tuple[str, str, str], ...]) -> tuple[str, ...]:
    """The methods as rows, in order: a file peer's method becomes the rows of its files."""
    rows: list[str] = []
    for m in given:
        rows += [r for r, method, _ in files if method == m] or [m]
    return tuple(rows)


def _lanes(texts: list[str], file_rows: tuple[str, ...] = ()) -> tuple[LaneSpec, ...]:
    """--lane: parsed, named apart from the methods, the file peers' rows and each other, head folders that can be
    heads."""
    lanes = tuple(LaneSpec.parse(s) for s in texts)
    names = [ln.name for ln in lanes]
    taken = [n for n in names if n in METHODS or n in file_rows or names.count(n) > 1]
    if taken:
        raise BenchError(f"--lane name {taken[0]!r} is a method name or given twice")
    for ln in lanes:
        if ln.head not in SPECIAL_HEADS:
            pipeline.check_head_path(ln.head)
    return lanes


def _check_heads(a: argparse.Namespace, methods: tuple[str, ...]) -> str:
    """The heads and trees the shorthands name go with their methods; returns the Medusa head's folder ("" when
    the method medusa does not run)."""
    if "eagle2-greedy-tree" in methods and a.tree != "auto":
        raise BenchError("eagle2-greedy-tree compares auto's greedy plan with eagle2's: it needs --tree auto")
    if any(m in B_METHODS for m in methods) != bool(a.head_b):
        raise BenchError("--head-b and the methods eagle2-head-b / eagle2-chain-b go together")
    if a.head_b:
        pipeline.check_head_path(a.head_b)
    if a.head_tree_b and "eagle2-head-b" not in methods:
        raise BenchError("--head-tree-b is the tree of eagle2-head-b: add that method (and --head-b)")
    if a.medusa_head:
        pipeline.check_head_path(a.medusa_head)
    if "medusa" not in methods:
        return ""
    medusa = a.medusa_head or pipeline.default_medusa_head(a.model)
    if not medusa:
        raise BenchError("method medusa needs --medusa-head (no Medusa head is shipped for this model)")
    return str(medusa)


def _check_numbers(a: argparse.Namespace) -> None:
    """Counts in range, and a questions file named."""
    if a.per_category < 0 or a.limit < 0 or a.threads < 0:
        raise BenchError("--per-category, --limit and --threads must be >= 0")
    if a.max_new_tokens < 1:
        raise BenchError(f"--max-new-tokens must be >= 1, got {a.max_new_tokens}")
    if a.repeats < 1:
        raise BenchError(f"--repeats must be >= 1, got {a.repeats}")
    if not a.questions:
        raise BenchError("no questions file: give --questions FILE.jsonl or set EAGLE_QUESTIONS (docs/usage.md)")


def machine_config(plan: Plan, stack: Stack, n_prompts: int) -> dict:
    """The `config` block of the JSON: machine, software, model and protocol settings."""
    import transformers

    target, tree, sel = stack.target, stack.trees["run"], plan.selection

    def lane_tree(name: str) -> dict | None:  # the tree a shorthand drafted with, when it ran
        return asdict(stack.lanes[name].tree) if name in stack.lanes else None

    return {
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu": cpu_description(), "cpu_count": os.cpu_count()},
        "torch": torch.__version__, "transformers": transformers.__version__, "torch_threads": torch.get_num_threads(),
        "dtype": str(target.dtype).removeprefix("torch."), "device": str(target.device),
        "dtype_timing_ms": target.dtype_timing, "kernels": target.kernel_choices(), "model": target.name,
        "choices": choices.describe(target, getattr(stack.eagle, "drafter", None)),
        "loader": stack.loader,
        "tree": {"spec": plan.tree_spec, **asdict(tree), **stack.tree_info["run"]},
        "chain_tree": lane_tree("eagle2-chain"), "head_tree": lane_tree("eagle2-head"),
        "head_tree_b": lane_tree("eagle2-head-b"),
        "methods": list(plan.methods),
        "lanes": {s.name: {"head": s.head, "tree": asdict(s.tree) if s.tree else None}
                  for s in plan.lanes if s.name not in METHODS} or None,  # --lane's own
        "temperature": plan.decode.sampling.temperature,
        "top_p": plan.decode.sampling.top_p, "top_k": plan.decode.sampling.top_k, "seed": plan.seed,
        "max_new_tokens": plan.decode.max_new_tokens, "questions": sel.questions,
        "categories": sorted(sel.categories) or "all", "per_category": sel.per_category, "limit": sel.limit,
        "split": sel.split,
        "file_categories": sel.file_categories,
        "n_prompts": n_prompts, "prompt_format": "raw" if plan.raw else "chat template when the tokenizer has one",
        "hf_pld_tokens": PLD_TOKENS if "hf-pld" in plan.methods else None,
        "gguf": {row: path for row, _, path in plan.files} or None,  # llamacpp's rows and their files
        "llama_cpp_python": llamacpp.version() if plan.files else None,
        "protocol": "1 warm-up per method; rotating method order; speedup = ratio of mean tok/s; "
                    "tau = Σ new tokens / Σ target forwards",
        "repeats": plan.repeats,  # rounds per prompt, fastest kept
        "turns": plan.turns,  # 2: second turns asked on the baseline's first answers (core/bench/turns.py)
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def heads_config(plan: Plan, stack: Stack) -> dict:
    """The heads the JSON names: --head (or the shipped one, or none), --head-b and the Medusa head."""
    trained = stack.eagle.drafter.trained
    if plan.loading.head:
        head = plan.loading.head
    elif trained:
        head = f"shipped for the model: {pipeline.default_head(plan.loading.model)}"
    else:
        head = "none: untrained random head"
    config = {"greedy_tree": {**asdict(stack.trees["greedy"]), **stack.tree_info["greedy"]}} \
        if "greedy" in stack.trees else {}
    medusa = next((s.head for s in plan.lanes if s.name == "medusa"), None)
    return {**config, "head": head, "head_trained": trained, "head_b": plan.head_b, "medusa_head": medusa}


def selected_questions(sel: Selection) -> list[dict]:
    """The questions the selection keeps; BenchError when none."""
    questions = select_questions(split_questions(read_questions(sel.questions), sel.split), sel.categories,
                                 sel.per_category, sel.limit, sel.file_categories)
    if not questions:
        raise BenchError("no questions selected")
    return questions


def announce(plan: Plan, stack: Stack, n_prompts: int) -> None:
    """One stderr line: what runs, on what, with which tree."""
    t = stack.target
    tree = stack.trees["run"]
    print(f"[bench] {t.name} on {t.device} ({t.dtype}), {n_prompts} prompts, methods {','.join(plan.methods)}, "
          f"tree {tree} ({describe(tree)}; {stack.tree_info['run']['source']}); warming up ...", file=sys.stderr)


def write_answers(plan: Plan, stack: Stack, questions: list[dict], rows: list[dict]) -> None:
    """--specbench-dir: Spec-Bench's per-method answer files (core/bench/specbench.py)."""
    t = stack.target
    files, skipped = write_specbench(plan.specbench_dir, questions, rows, stack.tok, t.name,
                                     str(t.dtype).removeprefix("torch."), plan.decode.sampling.temperature)
    print(f"[bench] Spec-Bench answer files: {', '.join(str(f) for f in files)}"
          + (f" (not written, no per-step lengths: {', '.join(skipped)})" if skipped else ""), file=sys.stderr)


def bench(plan: Plan) -> dict:
    """Load, select, run, summarize: the whole benchmark as one JSON-ready dict."""
    questions = selected_questions(plan.selection)
    stack = prepare(plan)
    prompts = [prompt.encode_prompt(stack.tok, q["turns"][0], "raw" if plan.raw else "auto") for q in questions]
    announce(plan, stack, len(questions))
    rows = run_turn(plan, stack, questions, prompts)
    if plan.turns == 2:  # the second turns, on conversations holding the baseline's first answers
        questions2, prompts2 = second_turns(questions, rows, stack.tok)
        rows += run_turn(plan, stack, questions2, prompts2) if questions2 else []
    if plan.specbench_dir:
        write_answers(plan, stack, questions, rows)
    by_turn = {"summary_by_turn": {str(t): summarize_rows(rows_of_turn(rows, t)) for t in (1, 2)
                                   if rows_of_turn(rows, t)}} if plan.turns == 2 else {}
    return {"config": {**machine_config(plan, stack, len(questions)), **heads_config(plan, stack)},
            "per_prompt": rows, "summary": summarize_rows(rows), **by_turn}


def print_tables(result: dict) -> None:
    """The summary tables on stdout, each turn's too with --turns 2."""
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


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (eagle-bench); returns the exit status (0 ok, 2 user error with one line on stderr: a bad flag
    is core/cli.py's UsageError, a bad plan a BenchError, both ValueErrors)."""
    return run("core.bench", _main, argv)


def _main(argv: list[str] | None) -> int:
    """Parse, check, run the plan, write its JSON (and HTML) and print the tables."""
    plan = validate(parse_args(argv))
    result = bench(plan)
    Path(plan.json).parent.mkdir(parents=True, exist_ok=True)
    write_json(plan.json, result)
    if plan.html:
        Path(plan.html).parent.mkdir(parents=True, exist_ok=True)
        c = result["config"]
        title = f"EAGLE Playground bench: {c['model']} · {c['device']} · {c['dtype']} · T={c['temperature']}"
        write_html(plan.html, result["per_prompt"], result["summary"], title)
    print_tables(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
