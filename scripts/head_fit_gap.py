"""Does a head fit the data it was trained on better than new data of the same kind? Teacher-forced agreement.

For each head and each folder of feature shards (written by `python -m core.train`), the recipe's loss without
noise and without gradients (`core.train.fit.losses`, training-time test unrolled --ttt-steps times) on --max-seqs
sequences drawn with a fixed seed: top-1 agreement with the target and soft cross-entropy against its distribution,
per unrolled step. Prints one JSON line per (head, shards) pair.

Read it as a capacity check: a head that scores the same on shards it trained on and on shards it never saw is not
memorising, so more data of that kind can only add what the head can still represent; a head that moves little on
the data it was just fine-tuned on has little room left at its size.

    python scripts/head_fit_gap.py --head runs/gemma-3-270m-r6/head --head runs/gemma-3-270m-r7/head \
        --shards runs/g6-data/shards --shards runs/g7-data/shards

Results: docs/results-history.md, "Round 7 against round 6".
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--head", action="append", required=True, help="an EAGLE-1/2 head folder (repeatable)")
    p.add_argument("--shards", action="append", required=True, help="a folder of shard_*.safetensors (repeatable)")
    p.add_argument("--model", default=None, help="target (default: the default model)")
    p.add_argument("--max-seqs", type=int, default=240, help="sequences drawn from each folder")
    p.add_argument("--ttt-steps", type=int, default=2)
    p.add_argument("--tokens-per-batch", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    for s in a.shards:
        if not any(Path(s).glob("shard_*.safetensors")):
            print(f"error: no shard_*.safetensors in {s}", file=sys.stderr)
            return 2
    import torch

    from core.drafters.heads import kind_of, load_any_head
    from core.models.target import load_target
    from core.train.data import load_shards
    from core.train.fit import FitConfig, batches, collate, losses

    target, _ = load_target(a.model, dtype="fp32")
    w = target.lm_head_weight.detach()
    heads = {}  # folder -> (head, its draft rows of the target's LM head (Vd, H))
    for h in a.head:
        head = load_any_head(h)
        if kind_of(head).name != "eagle":
            print(f"error: {h} is not an EAGLE-1/2 head", file=sys.stderr)
            return 2
        rows = w[head.vocab_ids] if len(head.vocab_ids) < target.vocab_size else w
        heads[h] = (head.float().eval(), rows.float().contiguous())
    cfg = FitConfig(ttt_steps=a.ttt_steps, tokens_per_batch=a.tokens_per_batch, noise=0.0)
    for s in a.shards:
        seqs = load_shards(Path(s))
        seqs = random.Random(a.seed).sample(seqs, min(a.max_seqs, len(seqs)))
        plan = batches(seqs, cfg, random.Random(a.seed))
        for name, (head, w_draft) in heads.items():
            top1 = [0.0] * a.ttt_steps
            ce = [0.0] * a.ttt_steps
            tokens = 0
            with torch.no_grad():
                for idx in plan:
                    ids, feat, valid, _ = collate(seqs, idx, cfg.max_len)
                    n = int(valid[:, 1:].sum())  # losses() averages over about this many positions per step
                    _, _, pl, ac = losses(head, target.embed, w_draft, ids, feat, valid, cfg, 1.0)
                    top1 = [t + n * x for t, x in zip(top1, ac)]
                    ce = [c + n * x for c, x in zip(ce, pl)]
                    tokens += n
            print(json.dumps({"head": name, "shards": s, "sequences": len(seqs), "tokens": tokens,
                              "top1": [round(t / tokens, 4) for t in top1],
                              "soft_ce": [round(c / tokens, 4) for c in ce]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
