"""A tree verify's LM-head rows, computed when the acceptance walk asks for them.

The target's body runs over all N tree nodes, but acceptance reads the logits of only the nodes its walk visits:
the accepted path and the node where it stops, about tau of N. Where one LM-head row costs much less than a batch
of rows (a product bound by arithmetic rather than by reading the weight, as fp32 on an AVX2-only CPU: 40 ms for
one row of Gemma 3 270M's 262,144-row head against 132 ms for 16, both through oneDNN on 2026-12-03, as timed in
`kernels.head_choice`), `TreeLogits` computes the root's row alone and, when the walk goes on, every row of the
accepted child's subtree in one more product: at most two products a step, never more than N rows. Where a row costs about what a batch does (bf16 on AMX, GPUs), all N rows are computed at
once, as before; `TargetModel.lazy_rows` is that choice, timed at start-up (core/models/kernels.py).

Either way a row's values are those of the same LM-head product over that row, so acceptance and its output are
unchanged up to the rounding that already differs between row counts (the fp32 equivalence tests pin the tokens).
"""
from __future__ import annotations

from typing import Callable

import torch

from core.engine.timing import now


def subtree(kids: list[list[int]], n: int) -> list[int]:
    """Node n and all its descendants, n first, in depth-first order (children in index order)."""
    out, stack = [], [n]
    while stack:
        m = stack.pop()
        out.append(m)
        stack.extend(reversed(kids[m]))
    return out


class TreeLogits:
    """rows[n] -> (V,) logits after tree node n; `head` maps (M, H) features (or one (H,) row) to logits.
    `ms` is the time of the products run on demand (0 when eager), for a decoder to count as verify work."""

    def __init__(self, head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, kids: list[list[int]],
                 lazy: bool, device: torch.device = torch.device("cpu")):
        self.head, self.hidden, self.kids, self.device = head, hidden, kids, device  # hidden: (N, H)
        self.rows: dict[int, torch.Tensor] = {}
        self.all = None if lazy else head(hidden)  # (N, V) when eager
        self.products = 0 if lazy else 1  # LM-head products run so far
        self.ms = 0.0  # the time of those run on demand

    def _run(self, h: torch.Tensor) -> torch.Tensor:
        t0 = now(self.device)
        out = self.head(h)
        self.ms += (now(self.device) - t0) * 1e3
        self.products += 1
        return out

    def __getitem__(self, n: int) -> torch.Tensor:
        if self.all is not None:
            return self.all[n]
        if n not in self.rows:
            if not self.rows:  # the walk's first row (the root): alone
                self.rows[n] = self._run(self.hidden[n])  # (V,)
            else:  # the walk went on: the rest of this node's subtree in one product
                nodes = [m for m in subtree(self.kids, n) if m not in self.rows]
                out = self._run(self.hidden[nodes])  # (len(nodes), V)
                self.rows.update({m: out[i] for i, m in enumerate(nodes)})
        return self.rows[n]
