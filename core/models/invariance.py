"""Start-up probe: up to how many rows a tree verify reproduces the one-token steps of plain decoding bit for bit on
this machine, in the model's dtype, and which kernel stops it.

With the row-invariant attention (core/engine/attention.py) a verify row differs from the one-token step only where a
kernel's result for a row depends on how many rows it computes together. The probe asks each kind of kernel a
target forward runs, with the routes start-up chose (core/models/kernels.py: the body's oneDNN route by row count,
the LM-head kernel):

- every distinct linear layer shape of the body (q/k/v/o, gate/up, down; bias included where the model has one):
  for m = 2 .. `ROW_LIMIT`, the m-row product against m one-row products of the same inputs, every row compared;
- the LM head: the one-row product (a one-token step's) against rows of m-row products (a verify's), m from
  `HEAD_ROWS`, first, middle and last row compared (a full head row costs a weight read, so fewer sizes);
- the attention itself on the model's head geometry: trees of `HEAD_ROWS` nodes after a prefix, each row against
  a one-row call over the keys that row sees.

The answer is the largest R such that every kernel passed at every m <= R (one more m fails: the first failure names
the kernel, e.g. "mlp.down_proj 4864x896 at 33 rows"). A few seconds on a 0.5B model: about 2,000 rows per linear
shape and a few dozen LM-head rows. Inputs are random (seeded) in the model's dtype: which kernel path runs depends on
the shapes, the dtype and the routes, not on the values.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import torch

from core.engine import attention, tree
from core.models import kernels
from core.models.pinned import layer_suffix

ROW_LIMIT = attention.ROW_LIMIT  # the widest verify probed (the widest the invariant attention computes itself)
HEAD_ROWS = (2, 3, 4, 8, 12, 16, 24, 32, 48, 64)  # LM-head and attention sizes probed (autotree's sizes and a few)


@dataclass(frozen=True)
class Invariance:
    """The probe's answer: `rows` (0 to ROW_LIMIT) and, when a kernel failed at rows + 1, which one."""

    rows: int
    broken: str = ""  # "" when every kernel passed up to ROW_LIMIT

    def describe(self) -> str:
        return f"bit-exact up to {self.rows} rows" + (f" ({self.broken} differs)" if self.broken else "")


def first_failure(product: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                  sizes, rows_of: Callable[[int], list[int]]) -> int | None:
    """The first m in `sizes` at which product(x[:m]) row r differs bitwise from product(x[r:r+1]) for some r in
    rows_of(m); None when none does. x (M, in) -> product -> (m, out)."""
    singles: dict[int, torch.Tensor] = {}
    for m in sizes:
        full = product(x[:m])
        for r in rows_of(m):
            if r not in singles:
                singles[r] = product(x[r:r + 1])[0]
            if not torch.equal(full[r], singles[r]):
                return m
    return None


def _routed(fn: Callable, rows_won: frozenset[int], packed) -> Callable[[torch.Tensor], torch.Tensor]:
    """fn(x) run inside the linear route a forward of len(x) rows takes (kernels.linear_route)."""
    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(), kernels.linear_route(len(x), rows_won, packed):
            return fn(x)
    return run


def linear_kinds(decoder: torch.nn.Module) -> dict[tuple[int, int, bool, int], tuple[list[str], torch.nn.Linear]]:
    """The body's nn.Linear layers grouped by how a forward computes them: {(out, in, has bias, pinned rows or 0):
    (the name suffixes of every layer of that kind, one module of it)}. Layers of one kind run the same kernel
    whatever their weights, so one module answers for all; a pinned layer (core/models/pinned.py) is its own kind,
    probed through its own forward, and a plain layer of the same shape is probed beside it."""
    out: dict = {}
    for name, m in decoder.named_modules():
        if isinstance(m, torch.nn.Linear):
            key = (m.out_features, m.in_features, m.bias is not None, getattr(m, "rows", 0))
            names, _ = out.setdefault(key, ([], m))
            if layer_suffix(name) not in names:
                names.append(layer_suffix(name))
    return out


def _layer_product(target, m: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """The layer as a forward runs it (its own forward, inside the route of the forward's row count)."""
    return _routed(lambda h: m(h), target.onednn_rows, target.packed)


def _drift(target, m: torch.nn.Linear, gen: torch.Generator, limit: int, upto: int) -> int | None:
    """The first row count in 2..upto at which layer `m`, run as a forward runs it, gives any row differently from
    a one-row call, on (limit, in) random rows drawn from `gen`; None if none does."""
    x = torch.randn(limit, m.in_features, generator=gen).to(target.dtype).to(target.device)  # (limit, in)
    return first_failure(_layer_product(target, m), x, range(2, upto + 1), lambda k: list(range(k)))


def probe_linears(target, limit: int = ROW_LIMIT, seed: int = 0) -> Invariance:
    """Every kind of body linear layer of `target` (a TargetModel), rows 2..limit, every row compared."""
    gen = torch.Generator().manual_seed(seed)
    best, broken = limit, ""
    for (o, i, _, _), (names, m) in linear_kinds(target.decoder).items():
        bad = _drift(target, m, gen, limit, best)
        if bad is not None:
            best, broken = bad - 1, f"{names[0]} {o}x{i} at {bad} rows"
    return Invariance(best, broken)


def variant_layers(target, limit: int, seed: int = 0) -> dict[str, int]:
    """{layer-name suffix (e.g. "mlp.down_proj"): the first row count at which its kind differs} for every body
    linear layer, every layer of a drifting shape included, that is not row-invariant up to `limit` rows here: the
    layers core/models/pinned.py pins."""
    gen = torch.Generator().manual_seed(seed)
    found: dict[str, int] = {}
    for (_, _, _, rows), (names, m) in linear_kinds(target.decoder).items():
        if rows:
            continue  # already pinned
        bad = _drift(target, m, gen, limit, limit)
        if bad is not None:
            found |= {n: bad for n in names}
    return found


def probe_head(target, limit: int, seed: int = 1) -> Invariance:
    """The LM head as the target runs it (`TargetModel.logits`): one (H,) row against rows of m-row products."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(limit, target.hidden_size, generator=gen).to(target.dtype).to(target.device)  # (limit, H)
    product = _routed(lambda h: target.logits(h[0])[None] if len(h) == 1 else target.logits(h), frozenset(), None)
    sizes = [m for m in HEAD_ROWS if m <= limit]
    bad = first_failure(product, x, sizes, lambda k: sorted({0, k // 2, k - 1}))
    if bad is None:
        return Invariance(limit)
    return Invariance(max([m for m in sizes if m < bad], default=1), f"LM head ({target.head_kernel}) at {bad} rows")


def probe_attention(config, dtype: torch.dtype, limit: int, prefix: int = 100, seed: int = 2,
                    device: torch.device = torch.device("cpu")) -> Invariance:
    """The invariant attention on the model's head geometry: trees of HEAD_ROWS nodes after `prefix` keys, each row
    against a one-row call over exactly the keys it sees."""
    heads, kv = config.num_attention_heads, getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    d = getattr(config, "head_dim", None) or config.hidden_size // heads
    gen, rnd = torch.Generator().manual_seed(seed), random.Random(seed)
    for n in [m for m in HEAD_ROWS if m <= limit]:
        parents = [-1] + [rnd.randrange(i) for i in range(1, n)]
        vis = torch.cat([torch.ones(n, prefix, dtype=torch.bool), tree.ancestor_mask(parents)], dim=1)  # (n, S)
        q = torch.randn(1, heads, n, d, generator=gen).to(dtype).to(device)
        k, v = (torch.randn(1, kv, prefix + n, d, generator=gen).to(dtype).to(device) for _ in range(2))
        vis = vis.to(device)
        out, _ = attention.invariant_attention(None, q, k, v, vis[None, None])
        for r in range(n):
            keys = vis[r].nonzero()[:, 0]
            one, _ = attention.invariant_attention(None, q[:, :, r:r + 1], k[:, :, keys], v[:, :, keys], None)
            if not torch.equal(one[0, 0], out[0, r]):
                return Invariance(max([m for m in HEAD_ROWS if m < n], default=1), f"attention at {n} rows")
    return Invariance(limit)


def probe(target) -> Invariance:
    """All three, each up to what the previous allowed: the rows every kernel of a forward reproduces."""
    found = probe_linears(target)
    steps = (lambda lim: probe_head(target, lim),
             lambda lim: probe_attention(target.config, target.dtype, lim, device=target.device))
    for step in steps:
        if found.rows < 2:
            break
        nxt = step(found.rows)
        found = nxt if nxt.rows < found.rows else found
    return found
