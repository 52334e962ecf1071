"""Pure draft-tree logic for EAGLE-2 (no nn, no transformers): selection, masks, depths, children.

A tree is described by `parents` alone: parents[0] == -1 is the root (the last committed token) and every other
node's parent has a smaller index. Masks, depths and paths are all derived from it (docs/ARCHITECTURE.md §2: never carried
separately, no offset arithmetic that encodes top_k).

EAGLE-2 (arXiv 2406.16858 §4): nodes are valued by their cumulative draft log-probability; expansion keeps the best
`top_k` candidates per level as the next frontier, and the rerank keeps the best `total_tokens - 1` nodes overall.
"""
from __future__ import annotations

import heapq

import torch


def depths(parents: list[int]) -> list[int]:
    """Depth of every node (root 0)."""
    out = [0] * len(parents)
    for i in range(1, len(parents)):
        out[i] = out[parents[i]] + 1
    return out


def children(parents: list[int]) -> list[list[int]]:
    """Children of every node, in index order (= descending draft score among siblings of one expansion)."""
    out: list[list[int]] = [[] for _ in parents]
    for i in range(1, len(parents)):
        out[parents[i]].append(i)
    return out


def ancestor_mask(parents: list[int]) -> torch.Tensor:
    """(N, N) bool: mask[i, j] is True when j is i itself or one of its ancestors."""
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    rows = mask.tolist()
    for i in range(n):
        row = rows[parents[i]][:] if i > 0 else [False] * n
        row[i] = True
        rows[i] = row
    return torch.tensor(rows, dtype=torch.bool) if n else mask


def select_nodes(parents: list[int], scores: list[float], budget: int) -> list[int]:
    """Keep the root and the best `budget - 1` nodes by score such that every kept node's parent is kept.

    Best-first over the candidate pool: a node becomes eligible once its parent is chosen. With EAGLE-2 scores
    (a child's cumulative log-prob never exceeds its parent's) this equals the paper's global top-N rerank; with any
    other scores (ties, noise) it still returns a connected tree. Ties prefer shallower, then earlier nodes.
    Returns the kept indices in ascending order (parents before children).
    """
    assert budget >= 1 and parents and parents[0] == -1
    kids = children(parents)
    d = depths(parents)
    heap: list[tuple[float, int, int]] = [(-scores[c], d[c], c) for c in kids[0]]
    heapq.heapify(heap)
    chosen = [0]
    while heap and len(chosen) < budget:
        _, _, node = heapq.heappop(heap)
        chosen.append(node)
        for c in kids[node]:
            heapq.heappush(heap, (-scores[c], d[c], c))
    return sorted(chosen)


def subtree_parents(parents: list[int], kept: list[int]) -> list[int]:
    """Parents re-indexed into the kept (ascending, parent-closed) node list."""
    where = {old: new for new, old in enumerate(kept)}
    return [-1 if i == 0 else where[parents[old]] for i, old in enumerate(kept)]


def graft(parents: list[int], tokens: list[int], chain: list[int]) -> tuple[list[int], list[int], int]:
    """Merge a chain of guesses (e.g. core/engine/lookup.py) under the root: follow existing children while the chain's
    tokens match them, then append the rest as new nodes. Siblings stay distinct tokens, indices stay topological.

    Returns (parents, tokens, n_before): nodes at index >= n_before came from the chain.
    """
    parents, tokens, n_before = list(parents), list(tokens), len(parents)
    kids = children(parents)
    at = 0
    for tok in chain:
        nxt = next((c for c in kids[at] if tokens[c] == tok), None) if at < n_before else None
        if nxt is None:
            parents.append(at)
            tokens.append(tok)
            nxt = len(tokens) - 1
        at = nxt
    return parents, tokens, n_before


def top_frontier(candidates: list[int], scores: list[float], k: int) -> list[int]:
    """The k best candidates by score (ties: earlier first), best first."""
    return sorted(candidates, key=lambda c: (-scores[c], c))[:k]
