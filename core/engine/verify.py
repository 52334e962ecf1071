"""Pure acceptance rules for tree verification (no model).

Notation (EAGLE papers): p = the target distribution at a node, q = the draft proposal. EAGLE-2 drafts are
deterministic top-k picks (q is a point mass), so the exact multi-candidate rule is: walk the siblings in order;
accept x with probability p(x); on rejection set p(x) = 0 and renormalise; if all siblings are rejected, the bonus
token is sampled from that residual. This reproduces p exactly (EAGLE maintainers, issues #110/#183/#221).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from core.engine.config import DecodeError
from core.engine.sampling import sample, uniform


def accept_greedy(
    kids: list[list[int]], tokens: list[int], target_argmax: Sequence[int] | Callable[[int], int]
) -> tuple[list[int], int]:
    """Longest path whose every token equals the target's argmax at its parent.

    kids: children per node; tokens: token id per node; target_argmax: the target's greedy token after each node,
    as a table or as a function of the node (asked only for the nodes the walk visits, so a decoder reduces about
    tau of the tree's N logits rows rather than all of them).
    Returns (path of node ids, root first; bonus token = target's token after the last path node).
    """
    greedy_at = target_argmax if callable(target_argmax) else target_argmax.__getitem__
    path = [0]
    while True:
        want = greedy_at(path[-1])
        nxt = next((c for c in kids[path[-1]] if tokens[c] == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)


def accept_sampled(
    kids: list[list[int]],
    tokens: list[int],
    probs_at: Callable[[int], torch.Tensor],
    generator: torch.Generator,
) -> tuple[list[int], int]:
    """Multi-candidate speculative sampling over a tree with deterministic proposals.

    probs_at(node) -> (V,) processed target distribution for the token after `node` (on any device; uniforms and
    the final draw come from `generator` through core.engine.sampling, so a seed gives the same result on every device).
    Returns (accepted path of node ids, root first; bonus token sampled from the final (residual) distribution).
    """
    path = [0]
    while True:
        p = probs_at(path[-1])
        rejected: list[int] = []  # siblings' tokens turned down at this node: zero in the residual
        left = 1.0  # mass the residual renormalises by (p's own total once a sibling is rejected)
        accepted = None
        for c in kids[path[-1]]:
            x = tokens[c]
            px = 0.0 if x in rejected else p[x].item()
            if uniform(generator) < px / left:
                accepted = c
                break
            if px > 0:  # p with x zeroed and renormalised, without a (V,) copy per sibling: the mass left is tracked
                if not rejected:
                    left = p.sum().item()  # p's own total, read once at the first rejection
                left -= px
                rejected.append(x)
                if left <= 0:
                    raise DecodeError("residual distribution has no mass left")
        if accepted is None:
            if rejected:  # one copy for the bonus draw; sample() scales by the total, so no division is needed
                p = p.clone()
                p[rejected] = 0.0
            return path, sample(p, generator)
        path.append(accepted)
