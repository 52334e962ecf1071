"""How high can τ go on this target at a temperature? The expected τ of a perfect drafter, from feature shards.

EAGLE-2 drafts deterministic guesses and verifies them by the exact multi-candidate rule (core.engine.verify): a drafted
token is accepted exactly when the target's own sample equals it. So the best any drafter can do with a tree budget
is to offer the target's likeliest tokens, and its expected τ for one step is 1 + the sum, over the tree's nodes, of
the product of the target's probabilities along each node's path; with N nodes the best tree holds the N likeliest
paths (what EAGLE-2's reranking aims at with the head's guesses in place of the target's).

This script estimates that ceiling on the target's own text. For --max-seqs sequences from shards written by
`python -m core.train` it recomputes the target's distribution at --temperature for every generated position (the
LM head over the stored post-norm features), and at every start position builds the best tree of --total-tokens
nodes, depth <= --depth, at most --top-k children a node, taking the distribution at depth d from the stored
sequence's position t+d. That is an approximation: the tree's paths follow the target's likeliest tokens, the
stored text may have taken others (on greedy sequences the top-1 chain is exact). Sequences are reported in two
groups, greedy (every generated token the argmax) and sampled, since a sampled race decodes on sampled text.

    python scripts/probes/oracle_tau.py --shards runs/g10-data/shards --temperature 1 --max-seqs 96

Results: README, "At a glance" and the newest round's section.
"""
from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
from pathlib import Path
from typing import Sequence


def best_tree_accepts(levels: Sequence[Sequence[float]], total: int, top_k: int) -> float:
    """Expected accepted drafts of the best tree of at most `total` nodes, when every node at depth d+1 offers the
    same child probabilities levels[d] (sorted, largest first; the first top_k are used; len(levels) = max depth).

    Best-first over path products, as core.engine.tree.select_nodes does over a drafted pool, but lazily over the whole
    k-ary tree (8^6 nodes at 16,6,8 would not fit a pool): a node's first child and its next sibling are the only
    candidates it adds, both no likelier than the node itself, so nodes leave the heap in the order of their reach
    probability and the first `total` of them form the best tree."""
    if not levels or total < 1 or top_k < 1:
        return 0.0
    heap = [(-levels[0][0], 0, 0, 1.0)]  # (-reach probability, level index, sibling rank, parent's reach)
    accepted = 0.0
    for _ in range(total):
        if not heap:
            break
        neg, d, r, parent = heapq.heappop(heap)
        reach = -neg
        accepted += reach
        if r + 1 < min(top_k, len(levels[d])):
            heapq.heappush(heap, (-parent * levels[d][r + 1], d, r + 1, parent))
        if d + 1 < len(levels):
            heapq.heappush(heap, (-reach * levels[d + 1][0], d + 1, 0, reach))
    return accepted


def chain_accepts(top1: Sequence[float]) -> float:
    """Expected accepted drafts of a chain that guesses the target's top-1 at each of len(top1) levels."""
    out, reach = 0.0, 1.0
    for p in top1:
        reach *= p
        out += reach
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", required=True, help="a folder of shard_*.safetensors written by core.train")
    p.add_argument("--model", default=None, help="target (default: the default model)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--total-tokens", type=int, default=16)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--max-seqs", type=int, default=96, help="sequences drawn from the folder")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.temperature <= 0 or min(a.total_tokens, a.depth, a.top_k, a.max_seqs) < 1:
        p.error("--temperature must be > 0 (at T=0 a perfect drafter accepts every level) and the sizes >= 1")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if not any(Path(a.shards).glob("shard_*.safetensors")):
        print(f"error: no shard_*.safetensors in {a.shards}", file=sys.stderr)
        return 2
    import torch

    from safetensors import safe_open

    from core.models.target import load_target

    target, _ = load_target(a.model, dtype="fp32")
    index = []  # (shard, first row, end row, generated tokens) for every stored sequence
    for path in sorted(Path(a.shards).glob("shard_*.safetensors")):
        with safe_open(str(path), "pt") as d:
            off, gen = d.get_tensor("offsets").tolist(), d.get_tensor("generated").tolist()
        index += [(path, s, e, g) for s, e, g in zip(off[:-1], off[1:], gen)]
    picked = sorted(random.Random(a.seed).sample(index, min(a.max_seqs, len(index))), key=lambda x: (x[0], x[1]))
    groups: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for path, s0, s1, n_gen in picked:
            with safe_open(str(path), "pt") as d:
                ids = d.get_slice("ids")[s0:s1].long()  # (S,)
                feat = d.get_slice("feat")[s0:s1]  # (S, H) post-norm last hidden states
            if n_gen < a.depth:
                continue
            start = len(ids) - n_gen - 1  # feat[t] gives the distribution of ids[t + 1]
            last = len(ids) - 1  # the final feature's next token is not stored
            logits = torch.cat([target.logits(feat[t:min(t + 128, last)].float())
                                for t in range(start, last, 128)])  # (n_gen, V)
            greedy = bool((logits.argmax(-1) == ids[start + 1:]).float().mean() >= 0.98)
            probs = torch.softmax(logits / a.temperature, -1).topk(a.top_k, -1).values.tolist()  # (n_gen, k)
            g = groups.setdefault("greedy" if greedy else "sampled",
                                  {"sequences": 0, "positions": 0, "top1": 0.0, "chain": 0.0, "tree": 0.0})
            g["sequences"] += 1
            for i in range(len(probs) - a.depth + 1):  # start positions with every level's distribution stored
                levels = probs[i:i + a.depth]
                g["positions"] += 1
                g["top1"] += levels[0][0]
                g["chain"] += 1 + chain_accepts([lv[0] for lv in levels])
                g["tree"] += 1 + best_tree_accepts(levels, a.total_tokens, a.top_k)
    for name, g in sorted(groups.items()):
        n = max(g["positions"], 1)
        print(json.dumps({"shards": a.shards, "temperature": a.temperature, "group": name,
                          "sequences": int(g["sequences"]), "positions": int(g["positions"]),
                          "top1_mean": round(g["top1"] / n, 4),
                          f"chain_tau_depth{a.depth}": round(g["chain"] / n, 3),
                          f"tree_tau_{a.total_tokens},{a.depth},{a.top_k}": round(g["tree"] / n, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
