"""Growing an EAGLE-1/2 head before a fine-tune, each growth computing the same function at its start: a wider MLP
(`--widen-mlp`), more decoder layers (`--add-layers`) and a larger draft vocabulary (`--extend-vocab`); and the one
cut, fewer layers (`--keep-layers`), the shallower arm of a depth A/B.

A fine-tune from a trained head can then test whether its size, depth or vocabulary limits it, starting from the
trained head's own acceptance rather than from scratch.
"""
from __future__ import annotations

import math
from dataclasses import replace

import torch

from core.drafters.draft_head import EagleHead, init_head


def widen_mlp(head: EagleHead, intermediate: int, seed: int = 0) -> EagleHead:
    """`head` with its MLP grown to `intermediate` units, computing exactly the same function (Net2Net-style).

    The old units keep their weights; the new units get random gate/up rows and ZERO down_proj columns, so they add
    nothing until training moves them. A fine-tune from a trained head can then test whether the head's size, not
    its data, is what limits it, starting from the trained head's own acceptance rather than from scratch.
    """
    old = head.config.intermediate_size
    if intermediate <= old:
        raise ValueError(f"--widen-mlp {intermediate} must exceed the head's intermediate size {old}")
    g = torch.Generator().manual_seed(seed)
    grown = EagleHead(replace(head.config, intermediate_size=intermediate), head.vocab_ids)
    grown.trained = head.trained
    sd = head.state_dict()
    new = grown.state_dict()
    with torch.no_grad():
        for name, w in sd.items():
            if name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):  # (I, H): rows are units
                fresh = torch.randn(intermediate - old, w.shape[1], generator=g) / math.sqrt(w.shape[1])
                new[name] = torch.cat([w, fresh.to(w.dtype)], 0)
            elif name.endswith("mlp.down_proj.weight"):  # (H, I): columns are units
                new[name] = torch.cat([w, w.new_zeros(w.shape[0], intermediate - old)], 1)
            else:
                new[name] = w
    grown.load_state_dict(new)
    return grown.to(next(head.parameters()).dtype).eval()


def add_layers(head: EagleHead, n: int, seed: int = 0) -> EagleHead:
    """`head` with `n` decoder layers appended that start as the identity: random attention and MLP inputs, ZERO
    o_proj and down_proj, so each new layer adds nothing to its residual until training moves it. Like widen_mlp,
    a fine-tune from a trained head then tests depth without giving up what the head already drafts."""
    if n < 1:
        raise ValueError(f"--add-layers must be >= 1, got {n}")
    c = replace(head.config, num_layers=head.config.num_layers + n)
    grown = init_head(c, head.vocab_ids, seed=seed).to(next(head.parameters()).dtype)
    sd = grown.state_dict()
    sd.update(head.state_dict())
    with torch.no_grad():
        for i in range(head.config.num_layers, c.num_layers):
            sd[f"layers.{i}.self_attn.o_proj.weight"].zero_()
            sd[f"layers.{i}.mlp.down_proj.weight"].zero_()
    grown.load_state_dict(sd)
    grown.trained = head.trained
    return grown.eval()


def keep_layers(head: EagleHead, n: int) -> EagleHead:
    """`head` with only its first `n` decoder layers, every kept weight as it was: the shallower arm of a depth A/B
    started from a trained deeper head (the final norm and the LM-head rows then read layer n's output, so unlike
    the growths this changes the function until training adapts it)."""
    if not 1 <= n < head.config.num_layers:
        raise ValueError(f"--keep-layers must be between 1 and {head.config.num_layers - 1} for a "
                         f"{head.config.num_layers}-layer head, got {n}")
    kept = EagleHead(replace(head.config, num_layers=n), head.vocab_ids)
    sd = {k: w for k, w in head.state_dict().items()
          if not (k.startswith("layers.") and int(k.split(".")[1]) >= n)}
    kept.load_state_dict(sd)
    kept.trained = head.trained
    return kept.to(next(head.parameters()).dtype).eval()


def with_vocab(head: EagleHead, ids: torch.Tensor) -> EagleHead:
    """`head` drafting over `ids` ((Vd,) sorted target ids) instead of its own draft vocabulary. No EAGLE-1/2
    weight depends on the vocabulary (the target's LM-head rows score the predicted feature), so every weight is
    copied as it is."""
    grown = EagleHead(replace(head.config, draft_vocab_size=len(ids)), ids)
    grown.load_state_dict(head.state_dict())
    return grown
