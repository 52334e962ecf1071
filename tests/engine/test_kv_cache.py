"""KV compaction (docs/ARCHITECTURE.md §6.5): after keep(), the cache is exactly the cache of prompt + accepted tokens."""
from __future__ import annotations

import pytest
import torch

from conftest import PROMPT, run, tiny_head, tiny_target
from core.engine import kv_cache, tree
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder

PARENTS = [-1, 0, 0, 1, 1, 2, 3, 5, 6]  # 9 nodes, depth up to 4
PATHS = [
    [0],  # nothing accepted
    [0, 1],  # contiguous: the crop fast path
    [0, 1, 3],  # contiguous
    [0, 2, 5, 7],  # gathered
    [0, 1, 3, 6, 8],  # full depth, gathered
]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: "-".join(map(str, p)))
@pytest.mark.parametrize("kind", ["llama", "gemma3", "mistral"])
def test_keep_then_next_forward_equals_fresh_forward(kind, path):
    tgt = tiny_target(kind)
    tokens = torch.randint(0, tgt.vocab_size, (len(PARENTS),), generator=torch.Generator().manual_seed(2)).tolist()
    cache = tgt.new_cache()
    tgt.forward(torch.tensor([PROMPT]), cache)
    prefix = cache.get_seq_length()
    tgt.forward(torch.tensor([tokens]), cache, PARENTS, tree.depths(PARENTS), tree.ancestor_mask(PARENTS))
    kv_cache.keep(cache, prefix, path)
    assert cache.get_seq_length() == prefix + len(path)
    accepted = [tokens[i] for i in path]
    nxt = [5, 9]  # the bonus token and one more
    h, _ = tgt.forward(torch.tensor([nxt]), cache)
    fresh = tgt.new_cache()
    h_ref, _ = tgt.forward(torch.tensor([PROMPT + accepted + nxt]), fresh)
    torch.testing.assert_close(tgt.logits(h[0]), tgt.logits(h_ref[0, -2:]), rtol=1e-4, atol=1e-4)
    for a, b in zip(cache.layers, fresh.layers):
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(a.values, b.values, rtol=1e-4, atol=1e-4)


def test_crop_and_free(tiny_llama):
    tgt = tiny_llama
    cache = tgt.new_cache()
    tgt.forward(torch.tensor([PROMPT]), cache)
    kv_cache.crop(cache, 50)  # longer than the cache: no-op
    assert cache.get_seq_length() == len(PROMPT)
    kv_cache.crop(cache, 7)
    assert cache.get_seq_length() == 7 and all(layer.keys.shape[-2] == 7 for layer in cache.layers)
    h, _ = tgt.forward(torch.tensor([PROMPT[7:9]]), cache)
    h_ref, _ = tgt.forward(torch.tensor([PROMPT[:9]]), tgt.new_cache())
    torch.testing.assert_close(h[0], h_ref[0, 7:9], rtol=1e-4, atol=1e-4)
    kv_cache.free(cache)
    assert cache.get_seq_length() == 0


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_growing_layers_regrow_in_place_and_match_a_fresh_forward(kind, monkeypatch):
    """Pieces of 3, 1, 1, 5, ... tokens through a cache that starts at 4 slots: every regrowth keeps what was
    there, the layers hand attention views of exactly the filled slots, and keys equal one fresh forward's."""
    monkeypatch.setattr(kv_cache, "MIN_CAPACITY", 4)
    tgt = tiny_target(kind)
    cache = tgt.new_cache()
    cuts = [0, 3, 4, 5, 10, 11, 19, len(PROMPT)]
    for a, b in zip(cuts, cuts[1:]):
        h, _ = tgt.forward(torch.tensor([PROMPT[a:b]]), cache)
        layer = cache.layers[0]
        assert layer.keys.shape[-2] == b <= layer._k.shape[-2] and layer.keys.data_ptr() == layer._k.data_ptr()
    h_ref, _ = tgt.forward(torch.tensor([PROMPT]), tgt.new_cache())
    torch.testing.assert_close(h[0, -1], h_ref[0, -1], rtol=1e-4, atol=1e-4)
    kv_cache.free(cache)
    assert cache.get_seq_length() == 0 and cache.layers[0]._k is None  # the buffers go, not only the views


def test_eagle2_is_lossless_while_the_cache_regrows(monkeypatch):
    """Tree verifies append N nodes, acceptance moves the path in place: through many regrowths (capacity 4 at
    first) EAGLE-2 still equals the baseline token for token."""
    monkeypatch.setattr(kv_cache, "MIN_CAPACITY", 4)
    tgt = tiny_target("gemma3")
    head = tiny_head(tgt)
    cfg = DecodeConfig(40, tree=TreeConfig(10, 3, 3, 4))
    assert run(Eagle2Decoder(tgt, EagleDrafter(head, tgt)), PROMPT, cfg)[0] == run(BaselineDecoder(tgt), PROMPT, cfg)[0]


def test_stack_left_places_each_group_at_the_right_end():
    tgt = tiny_target("llama")
    rows = {0: PROMPT[:5], 1: PROMPT[:9], 2: PROMPT[3:8]}  # lengths 5, 9, 5: two groups
    parts = []
    for n, group in ((5, [0, 2]), (9, [1])):
        c = tgt.new_cache()
        tgt.forward(torch.tensor([rows[r] for r in group]), c)
        parts.append((group, n, c))
    singles = {r: tgt.new_cache() for r in rows}
    for r, c in singles.items():
        tgt.forward(torch.tensor([rows[r]]), c)
    cache = kv_cache.stack_left(parts, [5, 9, 5], 9, 16)
    layer = cache.layers[1]
    assert layer.keys.shape[-2] == 9 and layer._k.shape[-2] == 16
    for r, ids in rows.items():
        pad = 9 - len(ids)
        assert bool((layer.keys[r, :, :pad] == 0).all())
        torch.testing.assert_close(layer.keys[r, :, pad:], singles[r].layers[1].keys[0], rtol=1e-5, atol=1e-5)
