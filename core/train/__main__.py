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

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m core.train", description=__doc__)
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
    p.add_argument("--extra-shards", action="append", default=[], metavar="DIR",
                   help="also train on the shards in DIR (e.g. an earlier round's OUT/shards); repeatable")
    p.add_argument("--max-len", type=int, default=768, help="tokens per training sequence (longer ones are cut)")
    p.add_argument("--sample-share", type=float, default=0.3, help="share of batches sampled at T=1 (rest greedy)")
    p.add_argument("--chat", action="store_true", help="wrap prompts in the model's chat template")
    p.add_argument("--draft-vocab", type=int, default=16384, help="draft vocabulary size (0 = full)")
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--p-weight", type=float, default=0.1, help="weight of the soft cross-entropy vs feature loss")
    p.add_argument("--tokens-per-batch", type=int, default=4096)
    p.add_argument("--eval-questions", default=str(DATA / "spec_bench_questions.jsonl"))
    p.add_argument("--eval-per-category", type=int, default=2)
    p.add_argument("--eval-max-new", type=int, default=64)
    p.add_argument("--skip-data", action="store_true", help="train on the shards already on disk")
    p.add_argument("--data-only", action="store_true", help="stop after writing the shards (e.g. to train elsewhere)")
    p.add_argument("--init", default=None, help="start from this head folder (same draft vocabulary) instead of random")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="bf16")
    return p.parse_args(argv)


def check_args(a: argparse.Namespace) -> str | None:
    """Range checks before anything loads; the first problem as one line, else None."""
    import math

    for name in ("n_prompts", "batch", "max_prompt", "new_tokens", "max_text", "tokens_per_batch", "ttt_steps",
                 "max_len"):
        if getattr(a, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}"
    for name in ("n_text", "max_shards", "draft_vocab", "eval_per_category", "eval_max_new", "seed",
                 "min_prompt_chars"):
        if getattr(a, name) < 0:
            return f"--{name.replace('_', '-')} must be >= 0, got {getattr(a, name)}"
    for name in ("epochs", "lr"):
        v = getattr(a, name)
        if not math.isfinite(v) or v <= 0:
            return f"--{name.replace('_', '-')} must be a positive finite number, got {v}"
    if not math.isfinite(a.sample_share) or not 0.0 <= a.sample_share <= 1.0:
        return f"--sample-share must be in [0, 1], got {a.sample_share}"
    for d in a.extra_shards:
        if not list(Path(d).glob("shard_*.safetensors")):
            return f"--extra-shards {d}: no shard_*.safetensors there"
    return None


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    problem = check_args(a)
    if problem:
        print(f"core.train: error: {problem}", file=sys.stderr)
        return 2
    from core.config import TreeConfig
    from core.draft_head import HeadConfig, init_head, load_head, save_head
    from core.drafter import EagleDrafter
    from core.models import DEFAULT_MODEL, load_target
    from core.train.data import build_shards, draft_vocab, load_shards, read_pool, token_counts
    from core.train.evaluate import measure, sample_questions
    from core.train.fit import FitConfig, fit

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "train.log", "a", encoding="utf-8")

    def log(msg: str) -> None:
        logf.write(time.strftime("%H:%M:%S ") + msg + "\n")
        logf.flush()

    t0 = time.time()
    target, tok = load_target(a.model, dtype=a.dtype)
    log(f"target {target.name} {target.dtype}")
    rows = read_pool(a.prompts, a.text, a.n_prompts, a.n_text, a.seed, a.min_prompt_chars)
    if a.chat and tok.chat_template:
        for r in rows:
            if r["kind"] == "prompt":
                r["body"] = tok.apply_chat_template([{"role": "user", "content": r["body"]}], tokenize=False,
                                                    add_generation_prompt=True)
    if a.max_shards:
        rows = rows[: a.max_shards * a.batch]
    if not a.skip_data:
        build_shards(target, tok, rows, out / "shards", a.batch, a.max_prompt, a.new_tokens, a.max_text,
                     a.sample_share, a.seed)
    if a.data_only:
        log("data only: shards written")
        return 0
    seqs = load_shards(out / "shards")
    if a.max_shards:
        seqs = seqs[: a.max_shards * a.batch]
    extra_counts = {}
    for d in a.extra_shards:
        more = load_shards(Path(d))
        extra_counts[d] = len(more)
        seqs += more
    if not seqs:
        print("error: no training shards", file=sys.stderr)
        return 2
    vocab_ids, coverage = (None, 1.0)
    if a.draft_vocab:
        pool = read_pool(a.prompts, a.text, 10**9, 10**9, a.seed)
        vocab_ids, coverage = draft_vocab(seqs, a.draft_vocab, target.vocab_size,
                                          token_counts(tok, pool, target.vocab_size))
    log(f"{len(seqs)} sequences ({sum(extra_counts.values())} from --extra-shards), "
        f"draft vocab {a.draft_vocab or 'full'} covers {coverage:.4f} of tokens")
    hc = HeadConfig.for_target(target.hidden_size, target.vocab_size, a.draft_vocab)
    head = init_head(hc, vocab_ids, seed=a.seed).float()
    if a.init:
        start = load_head(a.init)
        if not torch.equal(start.vocab_ids, head.vocab_ids):
            log("--init head has another draft vocabulary; keeping its vocabulary")
            head = init_head(start.config, start.vocab_ids, seed=a.seed).float()
        head.load_state_dict(start.state_dict())
        log(f"initialised from {a.init}")
    w = target.lm_head_weight.detach()
    w_draft = w[head.vocab_ids] if a.draft_vocab else w
    cfg = FitConfig(epochs=a.epochs, lr=a.lr, ttt_steps=a.ttt_steps, tokens_per_batch=a.tokens_per_batch,
                    p_weight=a.p_weight, seed=a.seed, max_len=a.max_len)
    summary = fit(head, target.embed, w_draft, seqs, cfg, out, log)
    head.trained = True
    head_dir = Path(a.head_out or out / "head")
    save_head(head, head_dir)
    log(f"saved head to {head_dir}")
    # evaluate with the bf16 head exactly as shipped
    shipped = load_head(head_dir)
    drafter = EagleDrafter(shipped, target)
    qs = sample_questions(a.eval_questions, a.eval_per_category) if a.eval_per_category else []
    head_tree = TreeConfig(lookup=0)  # the head alone: context lookup would blur what training achieved
    mode = "chat" if a.chat and tok.chat_template else "raw"
    evals = [measure(target, tok, drafter, qs, a.eval_max_new, t, head_tree, prompt_mode=mode)
             for t in (0.0, 1.0)] if qs else []
    used = rows[: len(list((out / "shards").glob("shard_*.safetensors"))) * a.batch]
    n_prompt = sum(r["kind"] == "prompt" for r in used)
    card = {
        "model": target.name if a.model is None else a.model,
        "default_model": a.model in (None, DEFAULT_MODEL),
        "data": {"prompts_file": Path(a.prompts).name, "text_file": Path(a.text).name, "prompt_rows": n_prompt,
                 "text_rows": len(used) - n_prompt, "min_prompt_chars": a.min_prompt_chars, "sequences": len(seqs),
                 "extra_shards": extra_counts,
                 "init": a.init, "chat_template": bool(a.chat),
                 "generation": {"max_prompt": a.max_prompt, "new_tokens": a.new_tokens,
                                "sampled_share": a.sample_share}},
        "draft_vocab": {"size": a.draft_vocab or target.vocab_size, "token_coverage": round(coverage, 4)},
        "training": {**summary, "lr": a.lr, "max_len": a.max_len, "ttt_steps": a.ttt_steps,
                     "tokens_per_batch": a.tokens_per_batch,
                     "loss": f"smooth_l1(feature) + {a.p_weight} * soft CE (draft vocab), steps weighted 0.8^j"},
        "wall_seconds_this_run": round(time.time() - t0, 1),
        "hardware": {"machine": platform.machine(), "processor": platform.processor() or platform.machine(),
                     "torch_threads": torch.get_num_threads(), "device": str(target.device),
                     "dtype": str(target.dtype)},
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


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
