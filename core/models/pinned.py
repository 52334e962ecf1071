"""Row-pinned linear layers: a product whose CPU kernel rounds a row differently with the number of rows computed
together is always computed at one fixed row count, so a one-token step and a tree verify round every row alike.

Why: in bf16 on an AMD EPYC with AVX-512 BF16 the default model's `mlp.down_proj` (4864 -> 896) gives a different
row 0 for 2 rows than for 1 (its reduction over 4,864 inputs changes grouping with the row count), while at a fixed
row count each output row depends only on its own input row, wherever it sits (docs/trust.md §6, "Pinned
layers"). The start-up probe (core/models/invariance.py) finds such layers; the target
(core/models/target.py `use_attention`) swaps them for `PinnedLinear`, which pads every call of up to `rows` rows with
zero rows to exactly `rows` and computes it with one plain `torch.mm`, outside the body's oneDNN route
(core/models/kernels.py `OneDNNLinear` intercepts F.linear only), so the route chosen for the forward's row count
cannot change the kernel either. Calls of more rows (a prompt's prefill, which both decoders run alike) compute as
before.

The swap goes through nn.Module's public API (the parent's attribute is replaced by a subclass of nn.Linear holding
the same Parameter objects): weights are not copied, state_dict keys stay the same, and `unpin` puts the original
modules back.
"""
from __future__ import annotations

import re

import torch
import torch.nn.functional as F

PIN_ROWS = 32  # rows a pinned layer always computes: the engine's default tree (16) plus its context-lookup chain


def layer_suffix(name: str) -> str:
    """A body layer's name without its decoder-layer prefix: "layers.3.mlp.down_proj" (or, under a wrapper,
    "language_model.layers.3.mlp.down_proj") -> "mlp.down_proj"; other names as they are."""
    m = re.search(r"(?:^|\.)layers\.\d+\.(.+)$", name)
    return m.group(1) if m else name


class PinnedLinear(torch.nn.Linear):
    """`linear` computed at exactly `rows` rows for every call of up to `rows` rows (same Parameters, no copy)."""

    def __init__(self, linear: torch.nn.Linear, rows: int):
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features, self.rows = linear.in_features, linear.out_features, rows
        self.weight = linear.weight
        if linear.bias is None:
            self.register_parameter("bias", None)
        else:
            self.bias = linear.bias
        self.original = [linear]  # a list, so the module is not registered as a child (state_dict keys unchanged)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out); each of up to `rows` rows rounded as in a `rows`-row product."""
        flat = x.reshape(-1, self.in_features)  # (M, in)
        m = flat.shape[0]
        if m > self.rows:
            return F.linear(x, self.weight, self.bias)
        padded = flat.new_zeros(self.rows, self.in_features)  # (rows, in): zero rows do not touch the others
        padded[:m] = flat
        # torch.mm / addmm, not F.linear: no route intercepts them; addmm adds the bias before its one rounding
        out = (torch.mm(padded, self.weight.t()) if self.bias is None
               else torch.addmm(self.bias, padded, self.weight.t()))[:m]  # (M, out)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rows={self.rows}"


def pin(decoder: torch.nn.Module, suffixes: list[str] | tuple[str, ...], rows: int = PIN_ROWS) -> list[str]:
    """Swap every nn.Linear of `decoder` whose name ends with one of `suffixes` (e.g. "mlp.down_proj") for a
    PinnedLinear of `rows` rows; returns the names swapped. Earlier pins are undone first. ValueError for a suffix
    that names no layer (a choices file written for another model)."""
    unpin(decoder)
    done, used = [], set()
    for name, module in list(decoder.named_modules()):
        hit = [s for s in suffixes if name == s or name.endswith("." + s)]
        if type(module) is torch.nn.Linear and hit:
            parent_name, _, child = name.rpartition(".")
            setattr(decoder.get_submodule(parent_name) if parent_name else decoder, child, PinnedLinear(module, rows))
            done.append(name)
            used.update(hit)
    missing = [s for s in suffixes if s not in used]
    if missing:
        unpin(decoder)
        raise ValueError(f"pinned layers {', '.join(missing)}: no such linear layer in this model")
    return done


def unpin(decoder: torch.nn.Module) -> int:
    """Put back the original nn.Linear of every PinnedLinear in `decoder`; returns how many."""
    n = 0
    for name, module in list(decoder.named_modules()):
        if isinstance(module, PinnedLinear):
            parent_name, _, child = name.rpartition(".")
            setattr(decoder.get_submodule(parent_name) if parent_name else decoder, child, module.original[0])
            n += 1
    return n


def pinned_names(decoder: torch.nn.Module) -> list[str]:
    """Layer-name suffixes (the part after "layers.N.") of the pinned layers, each once, for records."""
    out: list[str] = []
    for name, module in decoder.named_modules():
        if isinstance(module, PinnedLinear):
            suffix = layer_suffix(name)
            if suffix not in out:
                out.append(suffix)
    return out
