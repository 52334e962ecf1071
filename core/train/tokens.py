"""A round's training data as token ids only: packed small enough to commit, rebuilt into feature shards later.

Generating a round's answers is the expensive part of making a head (hours on a 2-core CPU); its features are
cheaper: one teacher-forced forward over the stored sequences recomputes them (`generation.features`). How much cheaper
depends on the processor: on a GPU or a CPU with bf16 units far faster than generating; on an AVX2-only CPU (fp32) a
0.5B target rebuilt 133 tokens/s, no faster than the AVX-512 machine had generated them. So every round keeps, in
git, what the target wrote: `tokens.safetensors.xz`, an xz-compressed safetensors file with the concatenated ids
(int32), the sequence offsets, tokens generated per sequence and whether each was sampled, plus `round.json` (model,
prompt file and its sha256, the generation settings, counts). About one byte a token on chat answers. A later
session, on a machine where runs/ is gone, rebuilds the shards with

    python -m core.train.tokens rebuild data/tokens/MODEL/ROUND --out runs/ROUND/shards

and trains on them with `python -m core.train ... --skip-data --extra-shards runs/ROUND/shards`. `--head-type eagle3`
also stores the EAGLE-3 layer taps from the same forward (one rebuild serves both head kinds); `--shards N` rebuilds
only the first N shards (a session's worth: on an AVX2 CPU a 19k-token shard of the 0.5B chat model takes about
100 s in fp32).

Features from a teacher-forced forward equal the ones generation computed up to the order kernels sum in (one
forward over the whole sequence instead of one token at a time), which training does not mind.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save_file

from core.cli import Parser, fail
from core.train.packed import PACKED, pack, unpack

CARD = "round.json"


def read_shard_ids(path: Path) -> tuple[list[list[int]], list[int]]:
    """One feature shard's sequences (ids) and tokens generated per sequence; the features stay on disk."""
    with safe_open(str(path), "pt") as sh:
        ids, off = sh.get_tensor("ids"), sh.get_tensor("offsets").tolist()
        gen = sh.get_tensor("generated").tolist() if "generated" in sh.keys() else [0] * (len(off) - 1)
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])], gen


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pack_round(shards: Path, out: Path, settings: dict) -> dict:
    """Pack every shard in `shards` (a core.train run's OUT/shards) into out/; returns the card written.

    `settings` records how the data was made (model, prompt file, seed, sample share, ...); a shard's sampling flag
    is the one the run drew for it, `random.Random(seed + i).random() < sample_share` (core/train/shards.py).
    """
    import random  # the same draw build_shards made

    seqs, gen, sampled, index, files = [], [], [], [], sorted(shards.glob("shard_*.safetensors"))
    if not files:
        raise ValueError(f"{shards}: no shard_*.safetensors there")
    for path in files:
        i = int(path.stem.split("_")[1])
        s, g = read_shard_ids(path)
        draw = random.Random(settings["seed"] + i).random() < settings["sample_share"] if any(g) else False
        seqs += s
        gen += g
        sampled += [draw] * len(s)
        index += [i] * len(s)
    out.mkdir(parents=True, exist_ok=True)
    blob = pack(seqs, gen, sampled, index)
    (out / PACKED).write_bytes(blob)
    card = {**settings, "shards": len(files), "sequences": len(seqs), "tokens": sum(map(len, seqs)),
            "generated": sum(gen), "sampled_sequences": sum(sampled), "packed_bytes": len(blob),
            "bytes_per_token": round(len(blob) / max(1, sum(map(len, seqs))), 3)}
    (out / CARD).write_text(json.dumps(card, indent=1) + "\n")
    return card


def rebuild(folder: Path, out: Path, target, taps: tuple[int, ...] = (), limit: int = 0) -> dict:
    """Feature shards (the layout core/train/shards.py writes) from a packed round, by teacher-forced forwards.

    Each shard gets back its own name and sequences, so the run that made the round resumes over the rebuilt
    folder (rerun its command with --out at the rebuilt run: the planned batches already on disk are skipped).
    Resumes itself like data generation: a shard already on disk is skipped. `taps` (layer indices) also stores
    EAGLE-3's fused layer features (`taps`, bf16 (n, 3H)); `limit` > 0 rebuilds only the first `limit` shards.
    """
    from core.train.generation import features
    from core.train.shards import shard_tensors

    seqs, gen, _, index = unpack((folder / PACKED).read_bytes())
    out.mkdir(parents=True, exist_ok=True)
    t0, done = time.time(), 0
    for i in sorted(set(index))[: limit or None]:
        path = out / f"shard_{i:05d}.safetensors"
        rows = [k for k, j in enumerate(index) if j == i]
        if path.exists():
            continue
        shard = shard_tensors(features(target, [seqs[k] for k in rows], taps), [gen[k] for k in rows])
        save_file(shard, str(path.with_suffix(".tmp")))
        path.with_suffix(".tmp").rename(path)
        done += int(shard["offsets"][-1])
    secs = time.time() - t0
    return {"sequences": len(seqs), "tokens_rebuilt": done, "seconds": round(secs, 1),
            "tokens_per_s": round(done / secs, 1) if done and secs else None}


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m core.train.tokens", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("pack", help="pack a run's shards into a committed token folder")
    pk.add_argument("shards", type=Path, help="a core.train run's OUT/shards")
    pk.add_argument("out", type=Path, help="e.g. data/tokens/qwen2.5-coder-0.5b-instruct/r5")
    pk.add_argument("--settings", required=True, type=Path,
                    help="JSON of how the data was made (model, prompts, seed, sample_share, new_tokens, ...)")
    rb = sub.add_parser("rebuild", help="recompute feature shards from a packed round")
    rb.add_argument("folder", type=Path)
    rb.add_argument("--out", required=True, type=Path, help="where the feature shards go (e.g. runs/q5/shards)")
    rb.add_argument("--dtype", default="auto",
                    help="bf16 | fp32 | auto (default: the faster of the two for a batched forward here, timed)")
    rb.add_argument("--head-type", default="eagle", help="eagle3 also stores its layer taps")
    rb.add_argument("--shards", type=int, default=0, help="rebuild only the first N shards (0: all)")
    a = p.parse_args(argv)
    try:
        if a.cmd == "pack":
            settings = json.loads(a.settings.read_text())
            for key in ("seed", "sample_share"):
                if key not in settings:
                    raise ValueError(f"--settings must give '{key}'")
            print(json.dumps(pack_round(a.shards, a.out, settings), indent=1))
        else:
            from core.drafters.heads import kind_named
            from core.models.kernels import bf16_matmul_is_faster
            from core.models.target import load_target

            card = json.loads((a.folder / CARD).read_text())
            kind = kind_named(a.head_type)
            # A teacher-forced forward is a batched product: with --dtype auto, time that shape (not a decode step);
            # bf16 is 8x slower than fp32 for it on an AVX2-only processor, faster where the CPU has bf16 units.
            target, _ = load_target(card["model"], dtype="fp32" if a.dtype == "auto" else a.dtype)
            if a.dtype == "auto" and bf16_matmul_is_faster(target.hidden_size):
                target, _ = load_target(card["model"], dtype="bf16")
            taps = kind.taps(target.num_layers)
            result = rebuild(a.folder, a.out, target, taps, a.shards)
            print(json.dumps({**result, "dtype": str(target.dtype), "taps": list(taps)}, indent=1))
    except (OSError, ValueError, KeyError) as e:
        return fail("[core.train.tokens]", e)  # one line, status 2 (core/cli.py)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
