"""Re-choose an EAGLE-1/2 head's draft vocabulary from what the target wrote in training shards; no training.

An EAGLE-1/2 head predicts a feature and scores it against the target's LM-head rows of its draft vocabulary (`d2t`),
so which rows those are is not a trained weight. A vocabulary chosen from an early round's data drifts from what later
rounds show the target writing, and a token outside it can never be drafted: every draft that needs it is lost. This
counts the tokens the target generated in the given shards (the text a head drafts; prompt and prefilled tokens only
break ties), takes the `size` most frequent (with `--keep`, the head's current ids plus the most frequent it lacks),
and writes the head with that vocabulary to `--out`; the other files of the folder are copied and the training card
records the change. The output of decoding never changes, only which drafts can be right; a larger vocabulary costs
a larger draft LM head on every level. Measured on the default head (README, "Round 13"): raising the share of the
race's output inside the vocabulary from 93 % to 96 % left τ where it was, so a re-chosen vocabulary is worth trying
on a head whose vocabulary came from other text, not as a routine step.

    python -m core.train.revocab --head runs/gemma-3-270m-r13/head --shards runs/g13-data/shards \\
        --shards runs/g12-data/shards --size 24576 --keep --out runs/gemma-3-270m-r13/head-24k

EAGLE-3 heads train their own LM head over their draft vocabulary and are refused, as is a folder with an inference
vocabulary (draft_vocab.json, core/train/prune.py: prune after re-choosing).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import torch


def choose(gen: torch.Tensor, counted: torch.Tensor, size: int, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Pure: the `size` ids (sorted) that the generated-token counts `gen` (V,) rank highest, ties broken by the
    counts of all tokens `counted` (V,) and then by the lower id; every id of `keep` stays in."""
    score = gen.double() + counted.double() / (float(counted.max()) + 1.0)  # the tie-break term stays under 1
    if keep is not None:
        score[keep.long().cpu()] = float("inf")
    order = torch.sort(score, descending=True, stable=True).indices[:size]
    return order.sort().values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """prune's --head DIR, --shards DIR..., --size N, and --keep, --out DIR (a bad flag is one line, exit status 2)."""
    from core.train.prune import vocab_parser

    p = vocab_parser("python -m core.train.revocab", __doc__.split("\n\n")[0], "draft vocabulary size to write")
    p.add_argument("--keep", action="store_true", help="keep every id of the head's vocabulary and add to it")
    p.add_argument("--out", required=True, help="the folder to write (may be --head itself)")
    return p.parse_args(argv)


def revocab(head_dir: Path, shard_dirs: list[Path], size: int, keep: bool, out_dir: Path) -> dict:
    """Write the head with its new draft vocabulary to out_dir; returns the card's record of the change."""
    from core.drafters.draft_head import DRAFT_VOCAB_FILE, EagleHead, load_head, save_head
    from core.drafters.storage import COMPACT, FULL, stored_dtype
    from core.train.prune import shard_token_counts
    from core.train.vocab import coverage

    if (head_dir / DRAFT_VOCAB_FILE).exists():
        raise ValueError(f"{head_dir} has an inference vocabulary ({DRAFT_VOCAB_FILE}); re-choose from a folder "
                         "without one, then prune the result")
    head = load_head(head_dir, inference_vocab=False)  # raises on EAGLE-3 and broken folders, with the reason
    own, vocab = head.vocab_ids, head.config.vocab_size
    low = len(own) if keep else 1
    if not low <= size <= vocab:
        raise ValueError(f"--size must be between {low:,} and {vocab:,}"
                         + (f" (--keep holds the head's {len(own):,} ids)" if keep else ""))
    gen = shard_token_counts(shard_dirs, vocab, generated=True)
    if not int(gen.sum()):
        raise ValueError("the shards hold no tokens the target generated (prefilled text only)")
    ids = choose(gen, shard_token_counts(shard_dirs, vocab), size, own if keep else None)
    grown = EagleHead(replace(head.config, draft_vocab_size=len(ids)), ids)
    grown.load_state_dict(head.state_dict())  # the vocabulary is a buffer outside the state dict: weights as they are
    dtype = stored_dtype(head_dir, "fc.weight")  # written back as stored (the full layout: training reads it)
    record = {"size": len(ids), "previous_size": len(own), "kept_previous": keep,
              "generated_tokens_counted": int(gen.sum()),
              "generated_coverage_before": round(coverage(gen, own), 4),
              "generated_coverage_after": round(coverage(gen, ids), 4),
              "shards": [str(d) for d in shard_dirs]}
    out_dir.mkdir(parents=True, exist_ok=True)
    if out_dir.resolve() != head_dir.resolve():
        for f in head_dir.iterdir():
            if f.is_file() and f.name not in (FULL, COMPACT, "config.json"):
                shutil.copy2(f, out_dir / f.name)
    save_head(grown, out_dir, dtype=dtype)
    card = out_dir / "training.json"
    if card.exists():
        data = json.loads(card.read_text())
        data.setdefault("draft_vocab", {})["size"] = len(ids)
        data["draft_vocab"]["rechosen"] = record
        card.write_text(json.dumps(data, indent=2) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    from core.train.prune import report

    a = parse_args(argv)
    return report(lambda: revocab(Path(a.head), [Path(d) for d in a.shards], a.size, a.keep, Path(a.out)))


if __name__ == "__main__":
    sys.exit(main())
