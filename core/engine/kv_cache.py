"""The target's KV cache: a growing buffer per layer, and compaction after tree verification; the only module that
touches transformers' cache layout.

`new_cache()` gives a transformers `Cache` whose layers append into a preallocated buffer whose capacity doubles
(`GrowingLayer`), instead of DynamicLayer's torch.cat of the whole layer on every forward: at a 700-token context
that cat copies about 13 MB per step for the default model (18 layers). Keys and values handed to attention are
views of the filled part, so no mask is needed for unused slots and the model code is unchanged.

The verify pass appends every tree node to the target cache at [prefix, prefix + N). After acceptance only the
root and the accepted nodes stay, moved in place to [prefix, prefix + len(path)) so positions stay contiguous.
"""
from __future__ import annotations

import torch
from transformers import Cache, DynamicLayer

MIN_CAPACITY = 256  # slots allocated at least (a short prompt plus its first steps without a regrowth)


class GrowingLayer(DynamicLayer):
    """A DynamicLayer that appends in place. `keys` / `values` are always (B, heads, n, D) views of the first n
    slots of (B, heads, capacity, D) buffers; when full, the buffers double (amortised O(1) copies per token).
    The buffers are inference tensors: forwards that write them run under torch.inference_mode(), as every
    caller here does."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._k = self._v = None
        self._n = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._k = self._v = None  # buffers, allocated on the first update
        self._n = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, t = self._n, key_states.shape[-2]
        if self._k is None or n + t > self._k.shape[-2]:
            self._grow(max(2 * (n + t), MIN_CAPACITY), key_states, value_states)
        self._k[..., n : n + t, :].copy_(key_states)
        self._v[..., n : n + t, :].copy_(value_states)
        self.truncate(n + t)
        return self.keys, self.values

    def _grow(self, capacity: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        k = key_states.new_empty((*key_states.shape[:-2], capacity, key_states.shape[-1]))
        v = value_states.new_empty((*value_states.shape[:-2], capacity, value_states.shape[-1]))
        if self._n:
            k[..., : self._n, :].copy_(self.keys)
            v[..., : self._n, :].copy_(self.values)
        self._k, self._v = k, v

    def truncate(self, length: int) -> None:
        """Keep the first `length` slots (no copy)."""
        self._n = length
        self.keys, self.values = self._k[..., :length, :], self._v[..., :length, :]

    def keep(self, prefix: int, idx: torch.Tensor) -> None:
        """Slots [0, prefix) plus slots idx (all >= prefix), moved in place to follow the prefix (index_select
        copies the sources first, so overlapping source and destination slots are safe)."""
        with torch.inference_mode():  # the buffers were made by an inference-mode forward
            self._k[..., prefix : prefix + len(idx), :] = self._k.index_select(-2, idx)
            self._v[..., prefix : prefix + len(idx), :] = self._v.index_select(-2, idx)
        self.truncate(prefix + len(idx))

    def crop(self, tokens_to_remove: int) -> None:  # transformers' API: a negative count to drop from the end
        if tokens_to_remove < 0 and self.is_initialized and self._k is not None:
            self.truncate(max(0, self._n + tokens_to_remove))
        elif tokens_to_remove:
            super().crop(tokens_to_remove)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            self._k, self._v = self._k[indices], self._v[indices]
            self.truncate(self._n)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            self._k = self._k.repeat_interleave(repeats, dim=0)
            self._v = self._v.repeat_interleave(repeats, dim=0)
            self.truncate(self._n)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx)

    def offload(self) -> None:  # move the buffers, not only the views (else the next update writes stale ones)
        if self.is_initialized and self._k is not None:
            self._k, self._v = self._k.to("cpu", non_blocking=True), self._v.to("cpu", non_blocking=True)
            self.truncate(self._n)

    def prefetch(self) -> None:
        if self.is_initialized and self._k is not None and self._k.device != self.device:
            self._k = self._k.to(self.device, non_blocking=True)
            self._v = self._v.to(self.device, non_blocking=True)
            self.truncate(self._n)

    def reset(self) -> None:
        self._k = self._v = None  # the buffers go too, not only the views
        self._n = 0
        super().reset()


def new_cache() -> Cache:
    """A cache with full-length growing layers everywhere (no window trimming; sliding windows live in the masks);
    owned by one decode call."""
    return Cache(layer_class_to_replicate=GrowingLayer)


def stack_left(parts: list[tuple[list[int], int, Cache]], lengths: list[int], width: int, capacity: int) -> Cache:
    """One left-padded (len(lengths), ...) growing cache from caches of row chunks: each part is (rows, chunk width,
    cache of those rows' left-padded prefill), placed at slots [width - chunk width, width) of its rows. Every slot
    before a row's own `lengths[r]` tokens is zeroed (a chunk's padding slots hold whatever its pad tokens made) and
    must be masked by the caller. Room for `capacity` slots, so decoding appends without regrowth."""
    batch = len(lengths)
    out = new_cache()
    first = parts[0][2]
    for i, layer in enumerate(first.layers):
        if not layer.is_initialized:  # a layer without its own K/V (shared with another layer)
            out.layers.append(GrowingLayer())
            continue
        k0, v0 = layer.keys, layer.values  # (b, heads, length, D)
        k = k0.new_zeros((batch, k0.shape[1], capacity, k0.shape[-1]))
        v = v0.new_zeros((batch, v0.shape[1], capacity, v0.shape[-1]))
        for rows, n, cache in parts:
            idx = torch.tensor(rows, device=k.device)
            k[idx, :, width - n : width] = cache.layers[i].keys
            v[idx, :, width - n : width] = cache.layers[i].values
        for r, n in enumerate(lengths):
            k[r, :, : width - n] = 0
            v[r, :, : width - n] = 0
        grown = GrowingLayer()
        grown.lazy_initialization(k0, v0)
        grown._k, grown._v = k, v
        grown.truncate(width)
        out.layers.append(grown)
    for _, _, cache in parts:
        free(cache)
    return out


def keep(cache: Cache, prefix: int, path: list[int]) -> None:
    """Keep cache rows [0, prefix) plus rows prefix + path[i] (path ascending, path[0] = root = 0); `cache` comes
    from new_cache()."""
    n_keep = len(path)
    if path == list(range(n_keep)):  # accepted nodes already sit right after the prefix
        crop(cache, prefix + n_keep)
        return
    idx = torch.tensor(path, device=cache.layers[0].keys.device) + prefix
    for layer in cache.layers:
        if layer.is_initialized:
            layer.keep(prefix, idx)


def crop(cache: Cache, length: int) -> None:
    """Truncate every layer of a new_cache() cache to `length` entries."""
    for layer in cache.layers:
        if layer.is_initialized and layer.keys.shape[-2] > length:
            layer.truncate(length)


def free(cache: Cache) -> None:
    """Drop all tensors now (a request's caches must not outlive it)."""
    for layer in cache.layers:
        if layer.is_initialized:
            layer.reset()
