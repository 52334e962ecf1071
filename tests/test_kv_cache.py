"""KV compaction (docs/ARCHITECTURE.md §6.5): after keep(), the cache is exactly the cache of prompt + accepted tokens."""
from __future__ import annotations

import pytest
import torch

from conftest import PROMPT, tiny_target
from core import kv_cache, tree

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
