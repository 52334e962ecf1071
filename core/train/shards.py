"""Training shards on disk: writing a plan's batches as safetensors shards, reading them back, and what they hold.

A shard (shard_{i:05d}.safetensors) holds, per batch of sequences: `ids` (int32, concatenated tokens), `feat` (bf16
(n, H) target features: the post-norm last hidden state), optional `taps` (bf16 (n, 3H): the EAGLE-3 layer inputs),
`offsets` (int64 sequence starts, plus the end) and `generated` (int64 per sequence: tokens written by the target).
A run resumes by skipping shards that already exist.
"""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from core.models.target import TargetModel
from core.train.data import plan_batches
from core.train.generation import Sequence, features, generate_batch


class Stored(NamedTuple):
    """One stored training sequence as training reads it back (load_shards)."""
    ids: torch.Tensor  # (S,) int64: prompt + answer
    feat: torch.Tensor  # (S, H) bf16: the target's post-norm last hidden states
    taps: torch.Tensor | None  # (S, 3H) bf16: EAGLE-3 layer inputs, when loaded
    start: int  # index of the first answer token (S - generated); 0 for a text row, which is all answer


def answers_opened(seqs: list[Stored], tail: list[int]) -> list[bool]:
    """Per stored sequence: False when the target generated an answer to a prompt that does not end with the chat
    template's `tail` (an old round cut the wrapped prompt, so the 'answer' continues the user's text)."""
    n = len(tail)
    return [not n or sq.start == 0 or sq.ids[max(0, sq.start - n):sq.start].tolist() == tail for sq in seqs]


def stored_prompts(dirs: list[Path]) -> set[tuple[int, ...]]:
    """Token sequences earlier runs started from: each stored sequence less the tokens the target generated.

    A prompt row whose encoding is in this set was already continued by an earlier round (same prompt, same cut);
    `plan_batches(exclude=...)` leaves it out so a new round spends its time on prompts no round has seen. A folder
    is a run's feature shards or a committed round of token ids (data/tokens/MODEL/rN): no rebuild needed.
    """
    from core.train.packed import PACKED, unpack

    seen: set[tuple[int, ...]] = set()
    for d in dirs:
        if (Path(d) / PACKED).exists():
            seqs, gen, _, _ = unpack((Path(d) / PACKED).read_bytes())
            seen.update(tuple(s[: len(s) - g]) for s, g in zip(seqs, gen))
            continue
        for path in sorted(Path(d).glob("shard_*.safetensors")):
            with safe_open(str(path), "pt") as sh:  # ids and offsets only; the features stay on disk
                ids, off = sh.get_tensor("ids").tolist(), sh.get_tensor("offsets").tolist()
                gen = sh.get_tensor("generated").tolist() if "generated" in sh.keys() else [0] * (len(off) - 1)
            seen.update(tuple(ids[a : b - g]) for a, b, g in zip(off[:-1], off[1:], gen))
    return seen


def build_shards(target: TargetModel, tok, rows: list[dict], out_dir: Path, batch: int, max_prompt: int,
                 new_tokens: int, max_text: int, sample_share: float, seed: int, prefill_share: float = 0.0,
                 taps: tuple[int, ...] = (), max_shards: int = 0, log=None,
                 exclude: set[tuple[int, ...]] | None = None) -> dict:
    """Write shard_{i:05d}.safetensors (the layout this module's docstring gives) for every planned batch not yet
    on disk; returns throughput counts."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = plan_batches(rows, tok, batch, max_prompt, max_text, prefill_share, seed, exclude)
    if max_shards:
        plan = plan[:max_shards]
    stats = {"generate": [0, 0, 0.0], "prefill": [0, 0, 0.0]}  # kind -> [tokens written, generated, seconds]
    bar = tqdm(plan, desc="data", unit="batch")
    for i, b in enumerate(bar):
        path = out_dir / f"shard_{i:05d}.safetensors"
        if path.exists():
            continue
        t0 = time.time()
        if b["kind"] == "generate":
            sample = random.Random(seed + i).random() < sample_share
            seqs = generate_batch(target, b["enc"], new_tokens, sample, seed + i, taps)
        else:
            seqs = features(target, b["enc"], taps)
        gen = [len(s[0]) - len(e) if b["kind"] == "generate" else 0 for s, e in zip(seqs, b["enc"])]
        keep = [j for j, s in enumerate(seqs) if len(s[0]) >= 4]
        seqs, gen = [seqs[j] for j in keep], [gen[j] for j in keep]
        if not seqs:
            continue
        shard = shard_tensors(seqs, gen)
        offsets = shard["offsets"]
        save_file(shard, str(path.with_suffix(".tmp")))
        path.with_suffix(".tmp").rename(path)
        st = stats[b["kind"]]
        st[0] += int(offsets[-1])
        st[1] += sum(gen)
        st[2] += time.time() - t0
        if log:
            log(f"shard {i} {b['kind']} rows {len(seqs)} tokens {int(offsets[-1])} generated {sum(gen)} "
                f"in {time.time() - t0:.1f}s")
        bar.set_postfix(tokens=int(offsets[-1]))
    return {k: {"tokens": v[0], "generated": v[1], "seconds": round(v[2], 1),
                "tokens_per_s": round(v[0] / v[2], 1) if v[2] else None,
                "generated_per_s": round(v[1] / v[2], 1) if v[2] and v[1] else None} for k, v in stats.items()}


def shard_tensors(seqs: list[Sequence], generated: list[int]) -> dict[str, torch.Tensor]:
    """One shard's tensors (the layout build_shards documents) from (ids, feat, taps or None) sequences and the
    tokens the target generated in each; `taps` only when the sequences carry them."""
    shard = {"ids": torch.tensor([t for s in seqs for t in s[0]], dtype=torch.int32),
             "feat": torch.cat([s[1] for s in seqs]).contiguous(),
             "offsets": torch.tensor([0] + [len(s[0]) for s in seqs], dtype=torch.long).cumsum(0),
             "generated": torch.tensor(generated, dtype=torch.long)}
    if seqs and seqs[0][2] is not None:
        shard["taps"] = torch.cat([s[2] for s in seqs]).contiguous()
    return shard


def load_shards(out_dir: Path, taps: bool = False) -> list[Stored]:
    """Every stored sequence of the shards in out_dir, in file order (Stored: ids, feat, taps or None, start).

    taps=True requires every shard to hold EAGLE-3 layer taps (a shard written for an EAGLE-1/2 head does not).
    """
    seqs = []
    for path in sorted(out_dir.glob("shard_*.safetensors")):
        d = load_file(str(path))
        if taps and "taps" not in d:
            raise ValueError(f"{path} has no EAGLE-3 layer taps (written for an EAGLE-1/2 head); "
                             "regenerate it or use --reprefill on its folder")
        off = d["offsets"].tolist()
        gen = d["generated"].tolist() if "generated" in d else [0] * (len(off) - 1)
        for a, b, g in zip(off[:-1], off[1:], gen):
            seqs.append(Stored(d["ids"][a:b].long(), d["feat"][a:b], d["taps"][a:b] if taps else None,
                               (b - a - g) if g else 0))
    return seqs


def shard_counts(out_dir: Path) -> dict:
    """Tokens stored and tokens the target generated, over the shards in out_dir (for the training card)."""
    tokens = generated = 0
    for path in sorted(out_dir.glob("shard_*.safetensors")):
        with safe_open(str(path), "pt") as d:  # counts only; the features stay on disk
            tokens += int(d.get_tensor("offsets")[-1])
            generated += int(d.get_tensor("generated").sum()) if "generated" in d.keys() else 0
    return {"tokens": tokens, "generated": generated}
