"""`python -m core.train`: self-distil data, extract features, build the draft vocabulary, train, evaluate, export.

Every stage resumes from --out: existing shards are skipped, training continues from state.pt.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import nn

from core.cli import USER_ERRORS, Parser, fail, run
from core.paths import data_dir

if TYPE_CHECKING:
    from core.drafters.heads import HeadKind
    from core.models.target import TargetModel
    from core.train.fit import FitConfig

DATA = data_dir()  # $EAGLE_DATA_DIR, else ../shared/data (core/paths.py)
# the head kinds with a training recipe in core/drafters/heads.py HEAD_KINDS (named here so --help needs no model
# code; tests/train/test_train.py checks the two agree)
HEAD_TYPES = ("eagle", "eagle3", "medusa")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: data flags, head flags, training flags, then evaluation and run flags."""
    p = Parser(prog="python -m core.train", description=__doc__)
    for add in (_data_flags, _head_flags, _fit_flags, _run_flags):
        add(p)
    return p.parse_args(argv)


def _data_flags(p: argparse.ArgumentParser) -> None:
    """The model, the run folder, the pool and how its rows become shards."""
    p.add_argument("--model", default=None, help="default model, local folder or hub id")
    p.add_argument("--out", required=True, help="run folder (shards, checkpoints, logs)")
    p.add_argument("--head-out", default=None, help="where to write the finished head (default OUT/head)")
    p.add_argument("--prompts", default=str(DATA / "train" / "prompts.jsonl"))
    p.add_argument("--text", default=str(DATA / "train" / "text.jsonl"))
    p.add_argument("--n-prompts", type=int, default=4000)
    p.add_argument("--n-text", type=int, default=700)
    p.add_argument("--max-shards", type=int, default=0, help="use only the first N shards (0 = all planned)")
    p.add_argument("--batch", type=int, default=32, help="sequences per generation batch")
    p.add_argument("--max-prompt", type=int, default=320)
    p.add_argument("--new-tokens", type=int, default=160)
    p.add_argument("--max-text", type=int, default=768)
    p.add_argument("--min-prompt-chars", type=int, default=0,
                   help="use only prompts at least this long (a long-context data round)")
    p.add_argument("--sources", default="", metavar="A,B",
                   help="use only prompts whose `source` is one of these (comma-separated; e.g. the chat turns)")
    p.add_argument("--extra-shards", action="append", default=[], metavar="DIR",
                   help="also train on the shards in DIR (e.g. an earlier round's OUT/shards); repeatable")
    p.add_argument("--exclude-shards", action="append", default=[], metavar="DIR",
                   help="leave out prompts an earlier run's shards in DIR (or a committed round of token ids, "
                        "data/tokens/MODEL/rN) already continued (repeatable)")
    p.add_argument("--max-len", type=int, default=768, help="tokens per training sequence (longer ones are cut)")
    p.add_argument("--sample-share", type=float, default=0.3, help="share of batches sampled at T=1 (rest greedy)")
    p.add_argument("--prefill-share", type=float, default=0.0,
                   help="share of prompts taken as text by one teacher-forced forward instead of being continued by "
                        "the target (cheap off-policy volume; 0 = every prompt is generated on-policy)")
    p.add_argument("--reprefill", action="append", default=[], metavar="DIR",
                   help="also take the token ids of the shards in DIR (an earlier run's prompts + continuations) and "
                        "compute fresh features for them (e.g. EAGLE-3 taps); repeatable")


def _head_flags(p: argparse.ArgumentParser) -> None:
    """Which head, its vocabulary, where it starts from and how it grows."""
    p.add_argument("--head-type", choices=HEAD_TYPES, default="eagle",
                   help="eagle: EAGLE-1/2 head (feature + token loss); eagle3: fused layer taps, own LM head, TTT; "
                        "medusa: K ResBlocks on the last feature guessing tokens t+2..t+K+1 (token-level drafting)")
    p.add_argument("--medusa-heads", type=int, default=5, help="Medusa heads K (the deepest tree level it drafts)")
    p.add_argument("--snapshots", type=int, default=0,
                   help="keep N heads along the way and measure tau of each at T=0 (a curve of tau against data)")
    p.add_argument("--chat", action="store_true", help="wrap prompts in the model's chat template")
    p.add_argument("--draft-vocab", type=int, default=16384, help="draft vocabulary size (0 = full)")
    p.add_argument("--extend-vocab", type=int, default=0, metavar="N",
                   help="with --init (EAGLE-1/2): add the N most frequent tokens of the data that the head's draft "
                        "vocabulary lacks (a new kind of text, e.g. another language)")
    p.add_argument("--widen-mlp", type=int, default=0, metavar="I",
                   help="with --init (EAGLE-1/2): grow the head's MLP to I units, same function at the start (the new "
                        "units' down_proj columns are zero), to test whether the head's size limits it")
    p.add_argument("--add-layers", type=int, default=0, metavar="N",
                   help="with --init (EAGLE-1/2): append N decoder layers that start as the identity (zero o_proj and "
                        "down_proj), to test whether the head's depth limits it")
    p.add_argument("--keep-layers", type=int, default=0, metavar="N",
                   help="with --init (EAGLE-1/2): keep only the head's first N decoder layers (the shallower arm of a "
                        "depth A/B)")
    p.add_argument("--no-fc-bias", action="store_true",
                   help="EAGLE-1/2 head without fc.bias (the layout vLLM's EAGLE drafter reads; with --draft-vocab 0 "
                        "the export loads there unedited)")


def _fit_flags(p: argparse.ArgumentParser) -> None:
    """The optimisation: epochs, rate, unrolled steps, loss weights, held-out curve, schedule, saves."""
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--ttt-steps", type=int, default=None, help="unrolled steps (default 3 for eagle, 7 for eagle3)")
    p.add_argument("--p-weight", type=float, default=0.1, help="weight of the soft cross-entropy vs feature loss")
    p.add_argument("--tokens-per-batch", type=int, default=4096)
    p.add_argument("--heldout-shards", action="append", default=[], metavar="DIR",
                   help="shards never trained on: teacher-forced top-1 / top-3 measured on them at the start, every "
                        "--eval-every steps and at the end (the training card's held-out curve); repeatable")
    p.add_argument("--eval-every", type=int, default=0, help="steps between held-out measures (0: start and end)")
    p.add_argument("--loss-on-prompt", action="store_true",
                   help="also score the prompt's tokens (rounds 1-5 did; the default scores the answers only)")
    p.add_argument("--vocab-on-prompts", action="store_true",
                   help="count the draft vocabulary over prompts too (rounds 1-5 did; default: over answers)")
    p.add_argument("--keep-cut-prompts", action="store_true",
                   help="keep stored answers whose prompt lost the chat template's tail (an older round's cut)")
    p.add_argument("--warmup-share", type=float, default=0.0,
                   help="warm up over this share of the steps (default 0: 100 steps, at most a tenth of the run)")
    p.add_argument("--schedule", choices=("linear", "cosine"), default="linear", help="decay after warmup")
    p.add_argument("--save-every-min", type=float, default=15.0,
                   help="save the training state at least this often (minutes; 0: by steps only)")


def _run_flags(p: argparse.ArgumentParser) -> None:
    """The card's evaluation, the stages to run, the start, the seed and the dtype."""
    p.add_argument("--eval-questions", default=str(DATA / "spec_bench_questions.jsonl"))
    p.add_argument("--eval-per-category", type=int, default=2)
    p.add_argument("--eval-max-new", type=int, default=64)
    p.add_argument("--skip-data", action="store_true", help="train on the shards already on disk")
    p.add_argument("--data-only", action="store_true", help="stop after writing the shards (e.g. to train elsewhere)")
    p.add_argument("--init", default=None, help="start from this head folder (same draft vocabulary) instead of random")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto",
                   help="bf16 | fp16 | fp32 | auto (default auto: on CPU the faster of bf16 and fp32 here, timed)")


def check_args(a: argparse.Namespace) -> str | None:
    """Range checks before anything loads; the first problem as one line, else None."""
    import math

    if a.ttt_steps is None:
        a.ttt_steps = 7 if a.head_type == "eagle3" else 3
    if a.no_fc_bias and a.head_type != "eagle":
        return "--no-fc-bias applies to --head-type eagle (EAGLE-3 and Medusa heads have no fc.bias to drop)"
    if a.extend_vocab and (a.head_type != "eagle" or not a.init or not a.draft_vocab):
        return "--extend-vocab grows the draft vocabulary of an --init EAGLE-1/2 head (--head-type eagle, --draft-vocab > 0)"
    if a.widen_mlp and (a.head_type != "eagle" or not a.init):
        return "--widen-mlp grows the MLP of an --init EAGLE-1/2 head (--head-type eagle)"
    if a.add_layers and (a.head_type != "eagle" or not a.init):
        return "--add-layers deepens an --init EAGLE-1/2 head (--head-type eagle)"
    if a.keep_layers and (a.head_type != "eagle" or not a.init or a.add_layers):
        return "--keep-layers cuts an --init EAGLE-1/2 head (--head-type eagle), without --add-layers"
    if a.head_type == "eagle3" and a.ttt_steps < 5:
        return f"--ttt-steps must be >= 5 for an EAGLE-3 head, got {a.ttt_steps}"
    for name in ("n_prompts", "batch", "max_prompt", "new_tokens", "max_text", "tokens_per_batch", "ttt_steps",
                 "max_len", "medusa_heads"):
        if getattr(a, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}"
    for name in ("n_text", "max_shards", "draft_vocab", "eval_per_category", "eval_max_new", "seed",
                 "min_prompt_chars", "snapshots", "extend_vocab", "widen_mlp", "add_layers", "keep_layers"):
        if getattr(a, name) < 0:
            return f"--{name.replace('_', '-')} must be >= 0, got {getattr(a, name)}"
    for name in ("eval_every", "save_every_min"):
        if getattr(a, name) < 0:
            return f"--{name.replace('_', '-')} must be >= 0, got {getattr(a, name)}"
    if not 0.0 <= a.warmup_share < 1.0:
        return f"--warmup-share must be in [0, 1), got {a.warmup_share}"
    for name in ("epochs", "lr"):
        v = getattr(a, name)
        if not math.isfinite(v) or v <= 0:
            return f"--{name.replace('_', '-')} must be a positive finite number, got {v}"
    for name in ("sample_share", "prefill_share"):
        v = getattr(a, name)
        if not math.isfinite(v) or not 0.0 <= v <= 1.0:
            return f"--{name.replace('_', '-')} must be in [0, 1], got {v}"
    for d in a.extra_shards + a.reprefill + a.exclude_shards + a.heldout_shards:
        if d in a.exclude_shards and (Path(d) / "tokens.safetensors.xz").exists():
            continue  # a committed round of token ids: its prompts are read without features
        if not list(Path(d).glob("shard_*.safetensors")):
            return f"{d}: no shard_*.safetensors there (--extra-shards / --reprefill / --exclude-shards / --heldout-shards)"
    own = (Path(a.out) / "shards").resolve()
    if any(Path(d).resolve() == own for d in a.exclude_shards):
        return f"--exclude-shards {own} is this run's own shard folder (a resumed run would plan other batches)"
    return None


@dataclass
class Job:
    """What every step of a run reads: the arguments, the command line, the run folder, its log, the target and
    its tokenizer, the head kind and the target layers it taps."""
    a: argparse.Namespace
    argv: list[str]
    out: Path
    log: Callable[[str], None]
    target: TargetModel
    tok: Any
    kind: HeadKind
    taps: tuple[int, ...]
    t0: float


@dataclass
class Data:
    """The training data of a run: the planned pool rows, the stored sequences trained on (Stored), the held-out
    ones, per --extra-shards folder its sequence count, the answers left out for a cut prompt, the throughput."""
    rows: list[dict]
    seqs: list
    heldout: list
    extra_counts: dict[str, int]
    dropped: int
    stats: dict


def main(argv: list[str] | None = None) -> int:
    """Parse, prepare the data, build the head, fit it, evaluate it, write its card. Every bad input raises
    ValueError (or OSError) and becomes one line and status 2 here (core/cli.py)."""
    a = parse(argv)
    try:
        problem = check_args(a)
        if problem:
            raise ValueError(problem)
        job = start(a, argv if argv is not None else sys.argv[1:])
        data = prepare_data(job)
        if data is None:
            return 0
        head, coverage = build_head(job, data)
        summary, head_dir = fit_head(job, data, head)
        evals, curve, mode = evaluate(job, head_dir, summary)
        write_card(job, data, head, coverage, summary, head_dir, evals, curve, mode)
    except USER_ERRORS as e:
        return fail("core.train", e)
    print(json.dumps({"head": str(head_dir), "tau": [e["tau"] for e in evals]}))
    return 0


def start(a: argparse.Namespace, argv: list[str]) -> Job:
    """Open the run folder and its log, load the target, name the head kind (core/drafters/heads.py: its init,
    taps, save and loss)."""
    from core.drafters.heads import kind_named
    from core.models.target import load_target

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "train.log", "a", encoding="utf-8")

    def log(msg: str) -> None:
        logf.write(time.strftime("%H:%M:%S ") + msg + "\n")
        logf.flush()

    t0 = time.time()
    kind = kind_named(a.head_type)
    target, tok = load_target(a.model, dtype=a.dtype)
    taps = kind.taps(target.num_layers)
    log(f"target {target.name} {target.dtype}; head type {a.head_type}" + (f", taps {taps}" if taps else ""))
    return Job(a, argv, out, log, target, tok, kind, taps, t0)


def prepare_data(job: Job) -> Data | None:
    """Write the shards this run plans (unless --skip-data), then read back what it trains on; None after
    --data-only."""
    a = job.a
    rows = pool_rows(job)
    stats = {} if a.skip_data else write_shards(job, rows)
    if a.data_only:
        job.log("data only: shards written")
        return None
    return load_data(job, rows, stats)


def pool_rows(job: Job) -> list[dict]:
    """The pool's rows, prompts wrapped in the chat template with --chat (cut inside the user's text, never
    through the template's tail), plus the sequences of --reprefill folders."""
    from core.train.data import chat_prompt, read_pool, user_turn
    from core.train.shards import load_shards

    a, tok = job.a, job.tok
    rows = read_pool(a.prompts, a.text, a.n_prompts, a.n_text, a.seed, a.min_prompt_chars,
                     tuple(s for s in a.sources.split(",") if s))
    if a.chat and tok.chat_template:
        for r in rows:
            if r["kind"] == "prompt":
                r["enc"] = chat_prompt(tok, r["body"], a.max_prompt)
                r["body"] = user_turn(tok, r["body"])
    for d in a.reprefill:
        rows += [{"kind": "ids", "id": f"{d}:{i}", "ids": ids.tolist()}
                 for i, (ids, *_) in enumerate(load_shards(Path(d)))]
    return rows


def write_shards(job: Job, rows: list[dict]) -> dict:
    """Generate and store the planned shards not yet on disk, leaving out prompts --exclude-shards already
    continued; returns this run's throughput."""
    from core.train.shards import build_shards, stored_prompts

    a = job.a
    exclude = stored_prompts([Path(d) for d in a.exclude_shards]) if a.exclude_shards else None
    if exclude:
        job.log(f"--exclude-shards: {len(exclude)} prompts earlier runs started from; the pool's copies are left out")
    stats = build_shards(job.target, job.tok, rows, job.out / "shards", a.batch, a.max_prompt, a.new_tokens,
                         a.max_text, a.sample_share, a.seed, a.prefill_share, job.taps, a.max_shards, job.log,
                         exclude)
    job.log(f"data throughput this run: {json.dumps(stats)}")
    return stats


def load_data(job: Job, rows: list[dict], stats: dict) -> Data:
    """This run's shards and --extra-shards, less answers whose prompt lost the chat template's tail (unless
    --keep-cut-prompts), and the --heldout-shards. ValueError when nothing is left to train on."""
    from core.train.data import template_tail
    from core.train.shards import answers_opened, load_shards

    a, taps = job.a, bool(job.taps)
    seqs = load_shards(job.out / "shards", taps=taps)
    extra_counts = {}
    for d in a.extra_shards:
        more = load_shards(Path(d), taps=taps)
        extra_counts[d] = len(more)
        seqs += more
    dropped = 0
    if a.chat and job.tok.chat_template and not a.keep_cut_prompts:
        ok = answers_opened(seqs, template_tail(job.tok))
        dropped = ok.count(False)
        seqs = [sq for sq, k in zip(seqs, ok) if k]
        job.log(f"{dropped} stored answers left out: their prompt lost the chat template's tail (--keep-cut-prompts)")
    heldout = [sq for d in a.heldout_shards for sq in load_shards(Path(d), taps=taps)]
    if not seqs:
        raise ValueError("no training shards")
    return Data(rows, seqs, heldout, extra_counts, dropped, stats)


def build_head(job: Job, data: Data) -> tuple[nn.Module, float]:
    """The head to train, float32: fresh for the target over the data's draft vocabulary, or --init's, then grown
    by the growth flags; with the share of the data's tokens its draft vocabulary covers."""
    from core.drafters.heads import HeadOptions

    a = job.a
    vocab_ids, coverage = choose_vocab(job, data)
    job.log(f"{len(data.seqs)} sequences ({sum(data.extra_counts.values())} from --extra-shards), "
            f"draft vocab {a.draft_vocab or 'full'} covers {coverage:.4f} of tokens")
    options = HeadOptions(draft_vocab=a.draft_vocab, seed=a.seed, medusa_heads=a.medusa_heads,
                          fc_bias=not a.no_fc_bias)
    head = job.kind.init(job.target, vocab_ids, options).float()
    if a.init:
        head, coverage = start_from_init(job, data, head, coverage)
    return grow(job, data, head, coverage)


def choose_vocab(job: Job, data: Data) -> tuple[torch.Tensor | None, float]:
    """The --draft-vocab most frequent ids of the data ((Vd,) sorted; None for the full vocabulary) and their
    coverage. Ties among ids the data never used fall to the pool's counts (tokenizing it takes minutes): not
    needed when an --init head brings its own vocabulary."""
    from core.train.data import read_pool
    from core.train.vocab import draft_vocab, token_counts

    a, vocab = job.a, job.target.vocab_size
    if not a.draft_vocab:
        return None, 1.0
    prior = None if a.init else token_counts(job.tok, read_pool(a.prompts, a.text, 10**9, 10**9, a.seed), vocab)
    return draft_vocab(data.seqs, a.draft_vocab, vocab, prior, not a.vocab_on_prompts)


def start_from_init(job: Job, data: Data, head: nn.Module, coverage: float) -> tuple[nn.Module, float]:
    """`head` with --init's weights; an --init head with another draft vocabulary is kept with its own."""
    from core.drafters.heads import kind_of, load_any_head
    from core.train.vocab import vocab_coverage

    a = job.a
    start = load_any_head(a.init)
    if kind_of(start).name != a.head_type:
        raise ValueError(f"--init {a.init} is not an {a.head_type} head")
    if not torch.equal(start.vocab_ids, head.vocab_ids):
        head = start.float()
        coverage = vocab_coverage(data.seqs, head.vocab_ids, job.target.vocab_size, not a.vocab_on_prompts)
        job.log(f"--init head has another draft vocabulary; keeping its {len(head.vocab_ids)} ids, "
                f"which cover {coverage:.4f} of tokens")
    head.load_state_dict(start.state_dict())
    job.log(f"initialised from {a.init}")
    return head, coverage


def grow(job: Job, data: Data, head: nn.Module, coverage: float) -> tuple[nn.Module, float]:
    """`head` grown as --extend-vocab, --widen-mlp and --add-layers ask (core/train/grow.py: the same function at
    the start) or cut as --keep-layers asks, with its coverage."""
    from core.train.grow import add_layers, keep_layers, widen_mlp, with_vocab
    from core.train.vocab import extend_vocab

    a = job.a
    if a.extend_vocab:
        old = len(head.vocab_ids)
        ids, coverage = extend_vocab(data.seqs, head.vocab_ids, a.extend_vocab, job.target.vocab_size,
                                     not a.vocab_on_prompts)
        head = with_vocab(head, ids).float()
        job.log(f"draft vocab extended {old} -> {len(ids)}; covers {coverage:.4f} of tokens")
    if a.widen_mlp:
        old = head.config.intermediate_size
        head = widen_mlp(head, a.widen_mlp, seed=a.seed).float()
        job.log(f"MLP widened {old} -> {a.widen_mlp} units (same function at the start)")
    if a.add_layers:
        head = add_layers(head, a.add_layers, seed=a.seed).float()
        job.log(f"{a.add_layers} decoder layer(s) added, {head.config.num_layers} in all (identity at the start)")
    if a.keep_layers:
        head = keep_layers(head, a.keep_layers).float()
        job.log(f"the first {a.keep_layers} decoder layer(s) kept")
    return head, coverage


def fit_config(job: Job, data: Data) -> FitConfig:
    """The flags as a FitConfig; with --snapshots, saves about every total/N steps so snapshot k lands on one."""
    import random

    from core.train.fit import FitConfig, batches

    a = job.a
    cfg = FitConfig(epochs=a.epochs, lr=a.lr, ttt_steps=a.ttt_steps, tokens_per_batch=a.tokens_per_batch,
                    p_weight=a.p_weight, seed=a.seed, max_len=a.max_len, answer_only=not a.loss_on_prompt,
                    warmup_share=a.warmup_share, schedule=a.schedule, save_every_s=60 * a.save_every_min,
                    eval_every=a.eval_every)
    if a.snapshots:
        n_steps = max(1, int(len(batches(data.seqs, cfg, random.Random(a.seed))) * a.epochs))
        cfg = FitConfig(**{**cfg.__dict__, "save_every": max(1, n_steps // a.snapshots)})
    return cfg


def snapshot_keeper(job: Job, cfg: FitConfig) -> Callable[[nn.Module, int, int], None]:
    """fit's `snapshot` callback: keep the head at about k/N of the run (k = 1..N, N = --snapshots) in
    OUT/snapshots for the curve of tau against data."""
    n, snap_dir, kept = job.a.snapshots, job.out / "snapshots", set()

    def snapshot(h: nn.Module, step: int, total: int) -> None:
        if n and any(abs(step - round(total * k / n)) < cfg.save_every for k in range(1, n + 1)) \
                and step not in kept:
            job.kind.save(h, snap_dir / f"step_{step:06d}")
            kept.add(step)

    return snapshot


def fit_head(job: Job, data: Data, head: nn.Module) -> tuple[dict, Path]:
    """Train `head` in place (core/train/fit.py; a state.pt from other data or arguments is a ValueError) and
    save it in its kind's layout; returns fit's summary and the head's folder."""
    from core.train.fit import fit

    a, target = job.a, job.target
    w = target.lm_head_weight.detach()  # (V, H)
    w_draft = w[head.vocab_ids] if a.draft_vocab else w  # (Vd, H)
    in_vocab = None  # (V,) bool over the draft vocabulary; a Medusa head's losses do not read it
    if a.draft_vocab:
        in_vocab = torch.zeros(target.vocab_size, dtype=torch.bool)
        in_vocab[head.vocab_ids] = True
    cfg = fit_config(job, data)
    summary = fit(head, target.embed, w_draft, data.seqs, cfg, job.out, job.log, snapshot_keeper(job, cfg),
                  data.heldout, in_vocab)
    head.trained = True
    head_dir = Path(a.head_out or job.out / "head")
    job.kind.save(head, head_dir)
    job.log(f"saved head to {head_dir}")
    return summary, head_dir


def evaluate(job: Job, head_dir: Path, summary: dict) -> tuple[list[dict], list[dict], str]:
    """The card's measures with the bf16 head exactly as shipped, at T=0 and T=1, on the default tree without
    context lookup (which would blur what training achieved), and tau at T=0 of every snapshot; with the prompt
    mode."""
    from core.drafters.heads import load_any_head
    from core.engine.config import TreeConfig
    from core.pipeline import decoder_for
    from core.train.evaluate import measure, sample_questions

    a, target, tok = job.a, job.target, job.tok
    eagle = decoder_for(load_any_head(head_dir), target)
    qs = sample_questions(a.eval_questions, a.eval_per_category) if a.eval_per_category else []
    tree = TreeConfig(lookup=0)
    mode = "chat" if a.chat and tok.chat_template else "raw"
    evals = [measure(target, tok, eagle, qs, a.eval_max_new, t, tree, prompt_mode=mode)
             for t in (0.0, 1.0)] if qs else []
    curve = []
    tokens_per_step = summary["tokens"] * a.epochs / max(1, summary["steps"])
    for d in sorted((job.out / "snapshots").glob("step_*")) if a.snapshots and qs else []:
        step = int(d.name.split("_")[1])
        r = measure(target, tok, decoder_for(load_any_head(d), target), qs, a.eval_max_new, 0.0, tree,
                    prompt_mode=mode)
        curve.append({"step": step, "tokens_seen": round(step * tokens_per_step), "tau_t0": r["tau"],
                      "chain_alpha_t0": r["chain_alpha"]})
        job.log(f"snapshot {d.name}: tau {r['tau']:.3f}")
    return evals, curve, mode


def data_card(job: Job, data: Data) -> dict:
    """The card's `data` section: what the head was trained on and how it was made."""
    from core.train.shards import shard_counts

    a = job.a
    kinds = [r["kind"] for r in data.rows]  # planned rows (--max-shards may stop before all of them)
    return {"prompts_file": Path(a.prompts).name, "text_file": Path(a.text).name, "prompt_rows": kinds.count("prompt"),
            "text_rows": kinds.count("text"), "reprefill_rows": kinds.count("ids"),
            "min_prompt_chars": a.min_prompt_chars, "sequences": len(data.seqs), "extra_shards": data.extra_counts,
            "extra_stored": {d: shard_counts(Path(d)) for d in a.extra_shards},  # tokens, generated
            "init": a.init, "chat_template": bool(a.chat), "prefill_share": a.prefill_share,
            "reprefill": a.reprefill, "stored": shard_counts(job.out / "shards"),
            "heldout_shards": {d: shard_counts(Path(d)) for d in a.heldout_shards},
            "left_out_cut_prompts": data.dropped, "scored": "prompt and answer" if a.loss_on_prompt else "answers",
            "throughput_this_run": data.stats, "eagle3_taps": list(job.taps),
            "generation": None if a.skip_data else {"max_prompt": a.max_prompt, "new_tokens": a.new_tokens,
                                                    "sampled_share": a.sample_share}}


def training_card(job: Job, head: nn.Module, summary: dict, curve: list[dict]) -> dict:
    """The card's `training` section: fit's summary, the flags that shaped it, the kind's loss and facts."""
    a = job.a
    return {**summary, "lr": a.lr, "max_len": a.max_len, "ttt_steps": a.ttt_steps,
            "tokens_per_batch": a.tokens_per_batch, "loss": job.kind.loss.format(p_weight=a.p_weight),
            **job.kind.card(head),
            **({"widened_mlp_to": a.widen_mlp} if a.widen_mlp else {}),
            **({"added_layers": a.add_layers, "layers": head.config.num_layers} if a.add_layers else {}),
            **({"kept_layers": a.keep_layers, "layers": head.config.num_layers} if a.keep_layers else {}),
            "curve": curve}


def write_card(job: Job, data: Data, head: nn.Module, coverage: float, summary: dict, head_dir: Path,
               evals: list[dict], curve: list[dict], mode: str) -> None:
    """training.json beside the head: data, vocabulary, training, hardware, evaluation and the command; a later
    round carries the card of the --init head it started from."""
    from core.models.kernels import cpu_description
    from core.models.target import DEFAULT_MODEL

    a, target = job.a, job.target
    card = {
        "model": target.name if a.model is None else a.model,
        "default_model": a.model in (None, DEFAULT_MODEL),
        "head_type": a.head_type,
        "data": data_card(job, data),
        "draft_vocab": {"size": len(head.vocab_ids) if a.draft_vocab or a.extend_vocab else target.vocab_size,
                        "token_coverage": round(coverage, 4), "extended_by": a.extend_vocab or None,
                        "counted_over": "prompts and answers" if a.vocab_on_prompts else "answers"},
        "training": training_card(job, head, summary, curve),
        "wall_seconds_this_run": round(time.time() - job.t0, 1),
        "hardware": {"machine": platform.machine(), "processor": platform.processor() or platform.machine(),
                     "cpu": cpu_description(), "torch_threads": torch.get_num_threads(),
                     "device": str(target.device), "dtype": str(target.dtype), "dtype_timing_ms": target.dtype_timing},
        "evaluation": {"questions": Path(a.eval_questions).name,
                       "note": "evaluation only, never trained on; default tree without context lookup (head alone)",
                       "prompt_mode": mode, "results": evals},
        "command": "python -m core.train " + " ".join(job.argv),
    }
    if a.init and (Path(a.init) / "training.json").exists():
        card["init_card"] = json.loads((Path(a.init) / "training.json").read_text())
    (head_dir / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    job.log("done")


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (eagle-train): main with the CLI convention (core/cli.py)."""
    return run("core.train", main, argv)


if __name__ == "__main__":
    sys.exit(cli())
