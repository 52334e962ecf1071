"""`python -m core.train`: self-distil data, extract features, build the draft vocabulary, train, evaluate, export.

Every stage resumes from --out: existing shards are skipped, training continues from state.pt.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from core.cli import Parser, fail, run
from core.paths import data_dir

DATA = data_dir()  # $EAGLE_DATA_DIR, else ../shared/data (core/paths.py)
# the head kinds with a training recipe in core/drafters/heads.py HEAD_KINDS (named here so --help needs no model
# code; tests/test_train.py checks the two agree)
HEAD_TYPES = ("eagle", "eagle3", "medusa")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(prog="python -m core.train", description=__doc__)
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
                   help="leave out prompts an earlier run's shards in DIR already continued (repeatable)")
    p.add_argument("--max-len", type=int, default=768, help="tokens per training sequence (longer ones are cut)")
    p.add_argument("--sample-share", type=float, default=0.3, help="share of batches sampled at T=1 (rest greedy)")
    p.add_argument("--prefill-share", type=float, default=0.0,
                   help="share of prompts taken as text by one teacher-forced forward instead of being continued by "
                        "the target (cheap off-policy volume; 0 = every prompt is generated on-policy)")
    p.add_argument("--reprefill", action="append", default=[], metavar="DIR",
                   help="also take the token ids of the shards in DIR (an earlier run's prompts + continuations) and "
                        "compute fresh features for them (e.g. EAGLE-3 taps); repeatable")
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
    p.add_argument("--no-fc-bias", action="store_true",
                   help="EAGLE-1/2 head without fc.bias (the layout vLLM's EAGLE drafter reads; with --draft-vocab 0 "
                        "the export loads there unedited)")
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
    p.add_argument("--eval-questions", default=str(DATA / "spec_bench_questions.jsonl"))
    p.add_argument("--eval-per-category", type=int, default=2)
    p.add_argument("--eval-max-new", type=int, default=64)
    p.add_argument("--skip-data", action="store_true", help="train on the shards already on disk")
    p.add_argument("--data-only", action="store_true", help="stop after writing the shards (e.g. to train elsewhere)")
    p.add_argument("--init", default=None, help="start from this head folder (same draft vocabulary) instead of random")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto",
                   help="bf16 | fp16 | fp32 | auto (default auto: on CPU the faster of bf16 and fp32 here, timed)")
    return p.parse_args(argv)


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
    if a.head_type == "eagle3" and a.ttt_steps < 5:
        return f"--ttt-steps must be >= 5 for an EAGLE-3 head, got {a.ttt_steps}"
    for name in ("n_prompts", "batch", "max_prompt", "new_tokens", "max_text", "tokens_per_batch", "ttt_steps",
                 "max_len", "medusa_heads"):
        if getattr(a, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}"
    for name in ("n_text", "max_shards", "draft_vocab", "eval_per_category", "eval_max_new", "seed",
                 "min_prompt_chars", "snapshots", "extend_vocab", "widen_mlp", "add_layers"):
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
        if not list(Path(d).glob("shard_*.safetensors")):
            return f"{d}: no shard_*.safetensors there (--extra-shards / --reprefill / --exclude-shards / --heldout-shards)"
    own = (Path(a.out) / "shards").resolve()
    if any(Path(d).resolve() == own for d in a.exclude_shards):
        return f"--exclude-shards {own} is this run's own shard folder (a resumed run would plan other batches)"
    return None


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    problem = check_args(a)
    if problem:
        return fail("core.train", problem)
    from core.engine.config import TreeConfig
    from core.train.grow import add_layers, widen_mlp, with_vocab
    from core.drafters.heads import HeadOptions, kind_named, kind_of, load_any_head
    from core.models.kernels import cpu_description
    from core.models.target import DEFAULT_MODEL, load_target
    from core.pipeline import decoder_for
    from core.train.data import (answers_opened, build_shards, chat_prompt, draft_vocab, extend_vocab,
                                 load_shards, read_pool, shard_counts, stored_prompts, template_tail, token_counts,
                                 vocab_coverage)
    from core.train.evaluate import measure, sample_questions
    from core.train.fit import FitConfig, fit

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "train.log", "a", encoding="utf-8")

    def log(msg: str) -> None:
        logf.write(time.strftime("%H:%M:%S ") + msg + "\n")
        logf.flush()

    t0 = time.time()
    kind = kind_named(a.head_type)  # the head's life cycle: init, taps, save, loss (core/drafters/heads.py)
    target, tok = load_target(a.model, dtype=a.dtype)
    taps = kind.taps(target.num_layers)
    log(f"target {target.name} {target.dtype}; head type {a.head_type}" + (f", taps {taps}" if taps else ""))
    rows = read_pool(a.prompts, a.text, a.n_prompts, a.n_text, a.seed, a.min_prompt_chars,
                     tuple(s for s in a.sources.split(",") if s))
    if a.chat and tok.chat_template:
        for r in rows:
            if r["kind"] == "prompt":  # cut inside the user's text, never through the template's tail
                r["enc"] = chat_prompt(tok, r["body"], a.max_prompt)
                r["body"] = tok.apply_chat_template([{"role": "user", "content": r["body"]}], tokenize=False,
                                                    add_generation_prompt=True)
    for d in a.reprefill:
        rows += [{"kind": "ids", "id": f"{d}:{i}", "ids": ids.tolist()}
                 for i, (ids, *_) in enumerate(load_shards(Path(d)))]
    data_stats = {}
    if not a.skip_data:
        exclude = stored_prompts([Path(d) for d in a.exclude_shards]) if a.exclude_shards else None
        if exclude:
            log(f"--exclude-shards: {len(exclude)} prompts earlier runs started from; the pool's copies are left out")
        data_stats = build_shards(target, tok, rows, out / "shards", a.batch, a.max_prompt, a.new_tokens,
                                  a.max_text, a.sample_share, a.seed, a.prefill_share, taps, a.max_shards, log,
                                  exclude)
        log(f"data throughput this run: {json.dumps(data_stats)}")
    if a.data_only:
        log("data only: shards written")
        return 0
    seqs = load_shards(out / "shards", taps=bool(taps))
    extra_counts = {}
    for d in a.extra_shards:
        more = load_shards(Path(d), taps=bool(taps))
        extra_counts[d] = len(more)
        seqs += more
    dropped = 0
    if a.chat and tok.chat_template and not a.keep_cut_prompts:
        ok = answers_opened(seqs, template_tail(tok))
        dropped = ok.count(False)
        seqs = [sq for sq, k in zip(seqs, ok) if k]
        log(f"{dropped} stored answers left out: their prompt lost the chat template's tail (--keep-cut-prompts)")
    heldout = [sq for d in a.heldout_shards for sq in load_shards(Path(d), taps=bool(taps))]
    if not seqs:
        print("error: no training shards", file=sys.stderr)
        return 2
    answers = not a.vocab_on_prompts
    vocab_ids, coverage = (None, 1.0)
    if a.draft_vocab:
        # ties among ids the data never used fall to the pool's counts (tokenizing it takes minutes): not needed
        # when an --init head brings its own vocabulary
        prior = None if a.init else token_counts(tok, read_pool(a.prompts, a.text, 10**9, 10**9, a.seed),
                                                 target.vocab_size)
        vocab_ids, coverage = draft_vocab(seqs, a.draft_vocab, target.vocab_size, prior, answers)
    log(f"{len(seqs)} sequences ({sum(extra_counts.values())} from --extra-shards), "
        f"draft vocab {a.draft_vocab or 'full'} covers {coverage:.4f} of tokens")
    w = target.lm_head_weight.detach()
    options = HeadOptions(draft_vocab=a.draft_vocab, seed=a.seed, medusa_heads=a.medusa_heads, fc_bias=not a.no_fc_bias)
    head = kind.init(target, vocab_ids, options).float()
    if a.init:
        start = load_any_head(a.init)
        if kind_of(start).name != a.head_type:
            raise ValueError(f"--init {a.init} is not an {a.head_type} head")
        if not torch.equal(start.vocab_ids, head.vocab_ids):
            head = start.float()
            coverage = vocab_coverage(seqs, head.vocab_ids, target.vocab_size, answers)
            log(f"--init head has another draft vocabulary; keeping its {len(head.vocab_ids)} ids, "
                f"which cover {coverage:.4f} of tokens")
        head.load_state_dict(start.state_dict())
        log(f"initialised from {a.init}")
    if a.extend_vocab:
        old = len(head.vocab_ids)
        ids, coverage = extend_vocab(seqs, head.vocab_ids, a.extend_vocab, target.vocab_size, answers)
        head = with_vocab(head, ids).float()
        log(f"draft vocab extended {old} -> {len(ids)}; covers {coverage:.4f} of tokens")
    if a.widen_mlp:
        old = head.config.intermediate_size
        head = widen_mlp(head, a.widen_mlp, seed=a.seed).float()
        log(f"MLP widened {old} -> {a.widen_mlp} units (same function at the start)")
    if a.add_layers:
        head = add_layers(head, a.add_layers, seed=a.seed).float()
        log(f"{a.add_layers} decoder layer(s) added, {head.config.num_layers} in all (identity at the start)")
    w_draft = w[head.vocab_ids] if a.draft_vocab else w
    cfg = FitConfig(epochs=a.epochs, lr=a.lr, ttt_steps=a.ttt_steps, tokens_per_batch=a.tokens_per_batch,
                    p_weight=a.p_weight, seed=a.seed, max_len=a.max_len, answer_only=not a.loss_on_prompt,
                    warmup_share=a.warmup_share, schedule=a.schedule, save_every_s=60 * a.save_every_min,
                    eval_every=a.eval_every)
    in_vocab = None  # (V,) bool over the draft vocabulary; a Medusa head's losses do not read it
    if a.draft_vocab:
        in_vocab = torch.zeros(target.vocab_size, dtype=torch.bool)
        in_vocab[head.vocab_ids] = True
    save = kind.save
    snap_dir = out / "snapshots"
    snap_steps: set[int] = set()

    def snapshot(h, step: int, total: int) -> None:
        """Keep the head at about k/N of the run (k = 1..N) for the data-size curve."""
        if a.snapshots and any(abs(step - round(total * k / a.snapshots)) < cfg.save_every for k in
                               range(1, a.snapshots + 1)) and step not in snap_steps:
            save(h, snap_dir / f"step_{step:06d}")
            snap_steps.add(step)

    if a.snapshots:  # snapshot k lands on a save: save about every total/(N*4) steps
        from core.train.fit import batches
        import random
        n_steps = max(1, int(len(batches(seqs, cfg, random.Random(a.seed))) * a.epochs))
        cfg = FitConfig(**{**cfg.__dict__, "save_every": max(1, n_steps // a.snapshots)})
    try:
        summary = fit(head, target.embed, w_draft, seqs, cfg, out, log, snapshot, heldout, in_vocab)
    except ValueError as e:  # a state.pt from other data or arguments (core.train.fit.check_resume)
        print(f"core.train: error: {e}", file=sys.stderr)
        return 2
    head.trained = True
    head_dir = Path(a.head_out or out / "head")
    save(head, head_dir)
    log(f"saved head to {head_dir}")
    # evaluate with the bf16 head exactly as shipped
    shipped = load_any_head(head_dir)
    eagle = decoder_for(shipped, target)
    qs = sample_questions(a.eval_questions, a.eval_per_category) if a.eval_per_category else []
    head_tree = TreeConfig(lookup=0)  # the head alone: context lookup would blur what training achieved
    mode = "chat" if a.chat and tok.chat_template else "raw"
    evals = [measure(target, tok, eagle, qs, a.eval_max_new, t, head_tree, prompt_mode=mode)
             for t in (0.0, 1.0)] if qs else []
    curve = []
    tokens_per_step = summary["tokens"] * a.epochs / max(1, summary["steps"])
    for d in sorted(snap_dir.glob("step_*")) if a.snapshots and qs else []:
        step = int(d.name.split("_")[1])
        r = measure(target, tok, decoder_for(load_any_head(d), target), qs, a.eval_max_new, 0.0, head_tree,
                    prompt_mode=mode)
        curve.append({"step": step, "tokens_seen": round(step * tokens_per_step), "tau_t0": r["tau"],
                      "chain_alpha_t0": r["chain_alpha"]})
        log(f"snapshot {d.name}: tau {r['tau']:.3f}")
    kinds = [r["kind"] for r in rows]  # planned rows (--max-shards may stop before all of them)
    card = {
        "model": target.name if a.model is None else a.model,
        "default_model": a.model in (None, DEFAULT_MODEL),
        "head_type": a.head_type,
        "data": {"prompts_file": Path(a.prompts).name, "text_file": Path(a.text).name, "prompt_rows": kinds.count("prompt"),
                 "text_rows": kinds.count("text"), "reprefill_rows": kinds.count("ids"), "min_prompt_chars": a.min_prompt_chars, "sequences": len(seqs),
                 "extra_shards": extra_counts,
                 "extra_stored": {d: shard_counts(Path(d)) for d in a.extra_shards},  # tokens, generated
                 "init": a.init, "chat_template": bool(a.chat), "prefill_share": a.prefill_share,
                 "reprefill": a.reprefill, "stored": shard_counts(out / "shards"),
                 "heldout_shards": {d: shard_counts(Path(d)) for d in a.heldout_shards},
                 "left_out_cut_prompts": dropped, "scored": "prompt and answer" if a.loss_on_prompt else "answers",
                 "throughput_this_run": data_stats, "eagle3_taps": list(taps),
                 "generation": None if a.skip_data else {"max_prompt": a.max_prompt, "new_tokens": a.new_tokens,
                                                         "sampled_share": a.sample_share}},
        "draft_vocab": {"size": len(head.vocab_ids) if a.draft_vocab or a.extend_vocab else target.vocab_size,
                        "token_coverage": round(coverage, 4), "extended_by": a.extend_vocab or None,
                        "counted_over": "prompts and answers" if a.vocab_on_prompts else "answers"},
        "training": {**summary, "lr": a.lr, "max_len": a.max_len, "ttt_steps": a.ttt_steps,
                     "tokens_per_batch": a.tokens_per_batch,
                     "loss": kind.loss.format(p_weight=a.p_weight),
                     **kind.card(head),
                     **({"widened_mlp_to": a.widen_mlp} if a.widen_mlp else {}),
                     **({"added_layers": a.add_layers, "layers": head.config.num_layers} if a.add_layers else {}),
                     "curve": curve},
        "wall_seconds_this_run": round(time.time() - t0, 1),
        "hardware": {"machine": platform.machine(), "processor": platform.processor() or platform.machine(),
                     "cpu": cpu_description(), "torch_threads": torch.get_num_threads(),
                     "device": str(target.device), "dtype": str(target.dtype), "dtype_timing_ms": target.dtype_timing},
        "evaluation": {"questions": Path(a.eval_questions).name,
                       "note": "evaluation only, never trained on; default tree without context lookup (head alone)",
                       "prompt_mode": mode,
                       "results": evals},
        "command": "python -m core.train " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    if a.init and (Path(a.init) / "training.json").exists():  # a later round carries the card of the one before
        card["init_card"] = json.loads((Path(a.init) / "training.json").read_text())
    (head_dir / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    log("done")
    print(json.dumps({"head": str(head_dir), "tau": [e["tau"] for e in evals]}))
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (eagle-train): main with the CLI convention (core/cli.py)."""
    return run("core.train", main, argv)


if __name__ == "__main__":
    sys.exit(cli())
