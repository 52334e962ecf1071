"""A round's token ids packed for git (`tokens.safetensors.xz`): the format alone, with no model and no feature
shards, so every reader of a committed round (core/train/tokens.py rebuilds features from it; core/train/shards.py
and core/train/prune.py read only its ids) shares one definition without importing each other."""
from __future__ import annotations

import lzma

import torch
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes

PACKED = "tokens.safetensors.xz"


def pack(seqs: list[list[int]], generated: list[int], sampled: list[bool], shard: list[int]) -> bytes:
    """Sequences (prompt + continuation ids), per sequence the tokens generated, the sampling flag and the index of
    the shard it was written to -> xz bytes."""
    if not (len(seqs) == len(generated) == len(sampled) == len(shard)):
        raise ValueError("seqs, generated, sampled and shard must have one entry per sequence")
    lens = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    tensors = {"ids": torch.tensor([t for s in seqs for t in s], dtype=torch.int32),  # (N,)
               "offsets": torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)]),  # (S + 1,)
               "generated": torch.tensor(generated, dtype=torch.long),  # (S,)
               "sampled": torch.tensor(sampled, dtype=torch.bool),  # (S,)
               "shard": torch.tensor(shard, dtype=torch.int32)}  # (S,)
    return lzma.compress(save_bytes(tensors), preset=9)


def unpack(blob: bytes) -> tuple[list[list[int]], list[int], list[bool], list[int]]:
    """The inverse of pack()."""
    d = load_bytes(lzma.decompress(blob))
    off = d["offsets"].tolist()
    ids = d["ids"]
    return ([ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])], d["generated"].tolist(), d["sampled"].tolist(),
            d["shard"].tolist())
