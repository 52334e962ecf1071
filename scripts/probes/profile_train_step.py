"""Where one head-training step's time goes: the operator profile of `core.train.fit.losses` plus its backward.

Loads the target (for its embeddings and LM-head rows), a head (a trained one with --head, or a fresh EAGLE-1/2 head
over --draft-vocab rows), and feature shards written by `python -m core.train`; runs one warm-up step and then
--steps profiled steps of the recipe's loss (training-time test, soft cross-entropy over the draft vocabulary) with
its backward, no optimizer. Prints tokens per step, seconds per step, the share of the step in matrix products,
the GFLOP a step spends in LM-head products (the teacher's distribution, and every unrolled step's scores forward
and backward: 1 + 2 * ttt_steps products of tokens x H x draft vocab) and the rate they ran at, then the top
operators. Run it alone on the machine.

    python scripts/probes/profile_train_step.py --shards runs/g5-data/shards --head static/heads/gemma-3-270m

Results: README, "How the default head was trained".
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

MATMUL_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::matmul", "aten::linear")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", required=True, help="a folder of shard_*.safetensors from `python -m core.train`")
    p.add_argument("--model", default=None, help="target (default: the default model)")
    p.add_argument("--head", default=None, help="an EAGLE-1/2 head folder (default: a fresh head)")
    p.add_argument("--draft-vocab", type=int, default=16384, help="rows of a fresh head's draft vocabulary")
    p.add_argument("--dtype", default="fp32", help="the target's dtype (training reads fp32 features)")
    p.add_argument("--steps", type=int, default=2, help="profiled steps after one warm-up")
    p.add_argument("--tokens-per-batch", type=int, default=4096)
    p.add_argument("--ttt-steps", type=int, default=2)
    p.add_argument("--max-seqs", type=int, default=400, help="sequences read from the shards")
    p.add_argument("--top", type=int, default=12, help="operators listed")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    shards = Path(a.shards)
    if not shards.is_dir() or not any(shards.glob("shard_*.safetensors")):
        print(f"error: no shard_*.safetensors in {shards}", file=sys.stderr)
        return 2
    import torch
    from torch.profiler import ProfilerActivity, profile

    from core.drafters.draft_head import HeadConfig, init_head
    from core.drafters.heads import kind_of, load_any_head
    from core.models.target import load_target
    from core.train.shards import load_shards
    from core.train.vocab import draft_vocab
    from core.train.fit import FitConfig, batches, collate, losses

    target, _ = load_target(a.model, dtype=a.dtype)
    seqs = load_shards(shards)[: a.max_seqs]
    if a.head:
        head = load_any_head(a.head)
        if kind_of(head).name != "eagle":
            print(f"error: {a.head} is not an EAGLE-1/2 head", file=sys.stderr)
            return 2
    else:
        ids, _ = draft_vocab(seqs, a.draft_vocab, target.vocab_size) if a.draft_vocab else (None, 1.0)
        head = init_head(HeadConfig.for_target(target.hidden_size, target.vocab_size, len(ids) if a.draft_vocab
                                               else 0), ids)
    head = head.float().train()
    w = target.lm_head_weight.detach()
    w_draft = (w[head.vocab_ids] if len(head.vocab_ids) < target.vocab_size else w).float().contiguous()  # (Vd, H)
    cfg = FitConfig(ttt_steps=a.ttt_steps, tokens_per_batch=a.tokens_per_batch, p_weight=0.5)
    plan = batches(seqs, cfg, random.Random(0))
    feat_rms = float(torch.cat([s[1][:256].float() for s in seqs[:200]]).pow(2).mean().sqrt())
    gen = torch.Generator().manual_seed(0)

    def step(i: int) -> int:
        ids, feat, valid, *_ = collate(seqs, plan[i % len(plan)], cfg.max_len)
        loss, *_ = losses(head, target.embed, w_draft, ids, feat, valid, cfg, feat_rms, gen)
        loss.backward()
        head.zero_grad(set_to_none=True)
        return int(valid.sum())

    step(0)  # warm-up
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        tokens = sum(step(i) for i in range(1, a.steps + 1))
    seconds = (time.perf_counter() - t0) / a.steps
    ops = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ops)
    matmul = sum(e.self_cpu_time_total for e in ops if e.key in MATMUL_OPS)
    per_step = tokens / a.steps
    gflop = (1 + 2 * a.ttt_steps) * 2 * per_step * w_draft.shape[1] * w_draft.shape[0] / 1e9
    print(f"{per_step:.0f} tokens a step, {seconds:.2f} s a step ({per_step / seconds:.0f} tokens/s, profiler on); "
          f"draft vocab {w_draft.shape[0]}, {a.ttt_steps} unrolled steps, {torch.get_num_threads()} threads")
    print(f"matrix products: {100 * matmul / max(total, 1):.0f} % of operator time; LM-head products about "
          f"{gflop:.0f} GFLOP a step ({gflop / seconds:.0f} GFLOP/s if they took the whole step)")
    print(ops.table(sort_by="self_cpu_time_total", row_limit=a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
