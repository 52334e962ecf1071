"""Give a head folder an inference vocabulary: the N tokens of its draft vocabulary its training data used most.

A head trained over the target's full vocabulary (the layout vLLM's EAGLE-1/2 drafter reads) scores every draft
level against all of the target's LM-head rows: 49,152 for SmolLM2, which costs more than the head's own layers
on a CPU. Most of those rows are almost never the answer. This writes draft_vocab.json beside the weights
(core/drafters/draft_head.py reads it for EAGLE-1/2 heads), the N most frequent ids in the stored training sequences (prompt
and answer tokens, as the trainer's --draft-vocab counts them); the weights are untouched, so other engines load the
folder as before, and deleting the file restores the full vocabulary. Drafts outside the N ids are lost; the output
never changes. Rerunning replaces the file.

    python -m core.train.prune --head static/heads/smollm2-135m-instruct --shards runs/s3-data/shards --size 16384

The training card (training.json), when present, records the size, the share of counted tokens it covers and the
shards counted.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from core.cli import Parser, run


def shard_token_counts(dirs: list[Path], vocab: int, generated: bool = False) -> torch.Tensor:
    """(vocab,) token frequencies over every shard_*.safetensors in `dirs`, reading only the ids (not features);
    with `generated`, only the tokens the target wrote (each sequence's last `generated[i]` ids). A folder may also
    be a committed round of token ids (data/tokens/MODEL/rN, core/train/tokens.py): counted without a rebuild."""
    from safetensors import safe_open

    from core.train.packed import PACKED, unpack

    counts = torch.zeros(vocab, dtype=torch.long)
    for d in dirs:
        if (Path(d) / PACKED).exists():
            seqs, gen, _, _ = unpack((Path(d) / PACKED).read_bytes())
            parts = [[(s[len(s) - g:] if generated else s) for s, g in zip(seqs, gen) if g or not generated]]
        else:
            paths = sorted(Path(d).glob("shard_*.safetensors"))
            if not paths:
                raise ValueError(f"no shard_*.safetensors or {PACKED} in {str(d)!r}")
            parts = []
            for path in paths:
                with safe_open(str(path), "pt") as f:
                    ids = f.get_tensor("ids").long()
                    gen = f.get_tensor("generated").long().tolist() if "generated" in f.keys() else None
                    ends = f.get_tensor("offsets").long()[1:].tolist()
                starts = [0] + ends[:-1]
                if generated:  # keep each sequence's tail the target wrote; prefilled text has none
                    parts.append([ids[e - g:e] for e, g in zip(ends, gen or []) if g])
                else:
                    parts.append([ids[a:e] for a, e in zip(starts, ends)])
        seqs = [torch.as_tensor(seq, dtype=torch.long) for part in parts for seq in part]
        ids = torch.cat(seqs) if seqs else torch.zeros(0, dtype=torch.long)
        if len(ids) and int(ids.max()) >= vocab:
            raise ValueError(f"{d} holds token ids beyond the head's vocabulary ({vocab:,}): another model's data")
        counts += torch.bincount(ids, minlength=vocab)
    return counts


def most_frequent(own: torch.Tensor, counts: torch.Tensor, size: int) -> tuple[torch.Tensor, float]:
    """The `size` ids of `own` (the head's draft vocabulary) that `counts` ranks highest, ties to the lower id,
    returned sorted; and the share of all counted tokens they cover."""
    from core.train.vocab import coverage

    own = own.long().sort().values
    order = torch.sort(counts[own], descending=True, stable=True).indices[:size]
    ids = own[order].sort().values
    return ids, coverage(counts, ids)


def vocab_parser(prog: str, description: str, size_help: str) -> Parser:
    """The flags prune and revocab share: --head DIR, one or more --shards DIR, --size N (a bad flag is one line and
    exit status 2, core/cli.py)."""
    p = Parser(prog=prog, description=description)
    p.add_argument("--head", required=True, help="an EAGLE-1/2 head folder (config.json + model.safetensors)")
    p.add_argument("--shards", action="append", required=True, metavar="DIR",
                   help="a folder of training shards, or a committed round of token ids (data/tokens/MODEL/rN), to count "
                        "(repeatable)")
    p.add_argument("--size", type=int, required=True, help=size_help)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """--head DIR, one or more --shards DIR, --size N."""
    p = vocab_parser("python -m core.train.prune", __doc__.split("\n\n")[0], "tokens to keep")
    return p.parse_args(argv)


def prune(head_dir: Path, shard_dirs: list[Path], size: int) -> dict:
    """Write head_dir/draft_vocab.json and note it in the card; returns what was written (without the ids)."""
    from core.drafters.draft_head import DRAFT_VOCAB_FILE, load_head, write_draft_vocab

    head = load_head(head_dir, inference_vocab=False)  # the head as trained, whatever an earlier run wrote
    own = head.vocab_ids
    if not 0 < size < len(own):
        raise ValueError(f"--size must be between 1 and {len(own) - 1:,} (the head drafts over {len(own):,} tokens)")
    counts = shard_token_counts(shard_dirs, head.config.vocab_size)
    ids, share = most_frequent(own, counts, size)
    record = {"size": size, "of": len(own), "token_coverage": round(share, 4), "counted_tokens": int(counts.sum()),
              "shards": [str(d) for d in shard_dirs]}
    write_draft_vocab(head_dir, ids, record)
    record["file"] = DRAFT_VOCAB_FILE
    card = head_dir / "training.json"
    if card.exists():
        data = json.loads(card.read_text())
        data["inference_vocab"] = record
        card.write_text(json.dumps(data, indent=2) + "\n")
    return record


def report(work: Callable[[], dict]) -> int:
    """Run a vocabulary command's `work` as a CLI: its record as one JSON line and status 0, or one `error:` line on
    stderr and status 2, the CLI convention of core/cli.py (bad folders, shards and sizes alike: every failure, since
    safetensors and torch report a bad file with their own exception types)."""
    def emit(_argv: list[str] | None) -> int:
        print(json.dumps(work()))
        return 0

    return run("", emit, None, errors=(Exception,))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    return report(lambda: prune(Path(a.head), [Path(d) for d in a.shards], a.size))


if __name__ == "__main__":
    sys.exit(main())
