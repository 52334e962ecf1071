"""Row-invariant attention: each query row gets bitwise the same output however many rows are computed together and
wherever masked key columns sit, so a tree verify reproduces the one-token steps of plain decoding bit for bit.

Why: torch's CPU SDPA reduces differently with the query length and with which key columns are masked, so in bf16 a
16-row tree verify and a one-token step round one token's attention differently, and a greedy pick at a near tie
flips (docs/usage.md, "Can bf16 be made shape-consistent"). Here every row is computed in a canonical form that
depends only on the row itself:

1. the keys the mask lets the row see are gathered in sequence order (the committed prefix, then its ancestors in the
   tree, then itself: exactly the keys the one-token step saw when that token was decoded), padded with copies of
   key 0 to a multiple of `ALIGN` columns that the softmax masks out;
2. scores, softcapping and the softmax run in fp32 over that padded row, whose length depends only on how many keys
   the row sees;
3. rows that see the same padded number of keys go through one batched product (`torch.bmm`), one batch entry per
   (row, key-value head) with the same (query heads of the group x keys) shape as a one-token step's entry. A batch
   entry's result does not depend on the batch size when there are at least two entries and each entry's size is a
   multiple of 64 bytes (measured on MKL's batched GEMM; the start-up probe checks it on the machine at hand,
   core/models/invariance.py), so a one-token step with a single entry is computed with a duplicate.

The rows are grouped by padded key count (a tree verify has one or two groups; a Python loop runs over the groups,
never over rows). Every layer of a forward passes the same mask, so the grouping is computed once per forward: the
caller (core/models/target.py) passes a fresh dict as the `row_plans` keyword, which transformers hands to every
layer's attention call, and the plans live as long as that forward; a call without it computes its plan itself. A forward of more than `ROW_LIMIT` rows (a prompt's prefill, which both decoders run with the same
shape) and any batch other than 1 go to transformers' SDPA unchanged.

The function has transformers' attention-interface signature and is registered under `NAME`
(`transformers.AttentionInterface.register`); `core/models/target.py` selects it through the model's
attention implementation. Masks are the target's: additive (0 visible, a large negative value masked) or boolean
(True visible), shape (1, 1, T, S); None means causal (every key for a single row). Sliding windows live in the mask.
"""
from __future__ import annotations

import math

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "eagle_invariant"  # the attention implementation's name in transformers' registry
ROW_LIMIT = 64  # forwards with more query rows run SDPA (prefill); no tree verify the engine plans is wider
ALIGN = 16  # keys per row padded to a multiple of this: fp32 batch entries on 64-byte boundaries

PLANS_KWARG = "row_plans"  # the forward's keyword that carries its plans (a dict the caller makes per forward)


def register() -> str:
    """Register the invariant attention with transformers (idempotent); returns its implementation name."""
    AttentionInterface.register(NAME, invariant_attention)
    try:  # the mask builder for callers that pass 2D masks (the target itself always passes 4D masks or None)
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
        ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    except ImportError:
        pass
    return NAME


def visible_keys(mask: torch.Tensor | None, t: int, s: int, device: torch.device) -> torch.Tensor:
    """(t, s) bool: which of s keys each of t query rows attends to. mask (1, 1, t, s) additive or bool; None: causal
    (row i sees keys up to s - t + i)."""
    if mask is None:
        rows = torch.arange(t, device=device)[:, None] + (s - t)
        return torch.arange(s, device=device)[None, :] <= rows
    m = mask[0, 0]
    return m if m.dtype == torch.bool else m == 0


def row_plan(vis: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Groups of rows that see the same padded number of keys: [(rows (n,), key index (n, Lp), pad (n, Lp) bool)].
    Each row's index lists its visible keys in sequence order, then key 0 for the padding columns (`pad` True)."""
    t, s = vis.shape
    counts = vis.sum(-1)  # (t,)
    padded = (counts + ALIGN - 1) // ALIGN * ALIGN
    ar = torch.arange(s, device=vis.device)
    order = torch.where(vis, ar, ar + s).sort(dim=-1).values  # visible keys first, in sequence order
    plan = []
    for lp in padded.unique().tolist():
        rows = (padded == lp).nonzero()[:, 0]
        width = min(lp, s)
        idx = torch.zeros(len(rows), lp, dtype=torch.long, device=vis.device)
        idx[:, :width] = order[rows, :width]
        pad = torch.arange(lp, device=vis.device)[None, :] >= counts[rows, None]
        plan.append((rows, idx.masked_fill_(pad, 0), pad))
    return plan


def _plan_for(mask: torch.Tensor | None, t: int, s: int, device: torch.device, plans: dict | None) -> list:
    """row_plan for this mask, computed once per forward: `plans` is the forward's own dict (every layer of a forward
    passes the same mask object, one per layer kind: Gemma 3 has sliding and full), keyed by the mask's identity,
    which is stable while the forward holds its masks. Without `plans` the plan is computed for this call only."""
    key = (id(mask), t, s) if mask is not None else (None, t, s)
    if plans is not None and key in plans:
        return plans[key]
    plan = row_plan(visible_keys(mask, t, s, device))
    if plans is not None:
        plans[key] = plan
    return plan


def _group(q: torch.Tensor, key: torch.Tensor, value: torch.Tensor, idx: torch.Tensor, pad: torch.Tensor,
           scale: float, softcap: float | None) -> torch.Tensor:
    """One group of n rows seeing the same padded key count Lp. q (Hq, n, D), key/value (Hkv, S, D), idx/pad (n, Lp)
    -> (n, Hq, D) fp32. One bmm entry per (key-value head, row): (rep x D) @ (D x Lp), then (rep x Lp) @ (Lp x D)."""
    hq, n, d = q.shape
    hkv, lp = key.shape[0], idx.shape[1]
    rep = hq // hkv
    k = key.index_select(1, idx.reshape(-1)).view(hkv * n, lp, d).float()
    v = value.index_select(1, idx.reshape(-1)).view(hkv * n, lp, d).float()
    qg = q.view(hkv, rep, n, d).transpose(1, 2).reshape(hkv * n, rep, d).float()
    single = hkv * n == 1  # a lone entry takes another GEMM path: computed beside a duplicate instead
    if single:
        qg, k, v = (torch.cat([x, x]) for x in (qg, k, v))
    scores = torch.bmm(qg, k.transpose(1, 2)) * scale  # (B, rep, Lp)
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    b = scores.shape[0]
    masked = pad[None, :, None, :].expand(b // n, n, rep, lp).reshape(b, rep, lp)
    probs = torch.softmax(scores.masked_fill_(masked, -math.inf), dim=-1)
    out = torch.bmm(probs, v)[: hkv * n]  # (Hkv * n, rep, D)
    return out.view(hkv, n, rep, d).permute(1, 0, 2, 3).reshape(n, hq, d)


def invariant_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                        softcap: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: query (B, Hq, T, D), key/value (B, Hkv, S, D), mask (B, 1, T, S) or None
    -> (attention output (B, T, Hq, D) in the query's dtype, None). Row-invariant for B = 1 and T <= ROW_LIMIT
    (module docstring); otherwise SDPA as transformers runs it."""
    b, hq, t, d = query.shape
    s = key.shape[2]
    per_head_mask = attention_mask is not None and (attention_mask.dim() != 4 or attention_mask.shape[1] != 1)
    if b != 1 or t > ROW_LIMIT or per_head_mask or hq % key.shape[1]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      softcap=softcap, **kwargs)
    scale = scaling if scaling is not None else d ** -0.5
    out = query.new_empty((t, hq, d))
    for rows, idx, pad in _plan_for(attention_mask, t, s, query.device, kwargs.get(PLANS_KWARG)):
        q = query[0].index_select(1, rows)  # (Hq, n, D)
        out[rows] = _group(q, key[0], value[0], idx, pad, scale, softcap).to(query.dtype)
    return out.unsqueeze(0), None
