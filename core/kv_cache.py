"""KV-cache compaction after tree verification; the only module that touches transformers' cache layout.

The verify pass appended every tree node to the target cache at [prefix, prefix + N). After acceptance only the
root and the accepted nodes stay, moved to [prefix, prefix + len(path)) so positions stay contiguous.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache


def keep(cache: DynamicCache, prefix: int, path: list[int]) -> None:
    """Keep cache rows [0, prefix) plus rows prefix + path[i] (path ascending, path[0] = root = 0)."""
    n_keep = len(path)
    if path == list(range(n_keep)):  # accepted nodes already sit right after the prefix
        crop(cache, prefix + n_keep)
        return
    idx = torch.tensor(path, device=cache.layers[0].keys.device) + prefix
    for layer in cache.layers:
        if not layer.is_initialized:
            continue
        layer.keys = torch.cat([layer.keys[..., :prefix, :], layer.keys.index_select(-2, idx)], dim=-2)
        layer.values = torch.cat([layer.values[..., :prefix, :], layer.values.index_select(-2, idx)], dim=-2)


def crop(cache: DynamicCache, length: int) -> None:
    """Truncate every layer to `length` entries."""
    for layer in cache.layers:
        if layer.is_initialized and layer.keys.shape[-2] > length:
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]


def free(cache: DynamicCache) -> None:
    """Drop all tensors now (a request's caches must not outlive it)."""
    for layer in cache.layers:
        if layer.is_initialized:
            layer.reset()
