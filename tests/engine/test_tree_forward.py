"""One tree-masked target forward == running every root-to-leaf path on its own (docs/ARCHITECTURE.md §6.2).

Catches 4D-mask and position bugs (transformers #29525-style regressions). With Gemma 3 and Mistral the prefix is
longer than the sliding window and one branch is deeper than the window, so the window inside the tree counts too.
"""
from __future__ import annotations

import pytest
import torch

from conftest import KINDS, PROMPT, SLIDING_WINDOW, tiny_model, tiny_target
from core.engine import tree

# node: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
PARENTS = [-1, 0, 0, 0, 1, 1, 2, 4, 6, 7, 9, 10, 11, 12, 13, 14, 4]
assert max(tree.depths(PARENTS)) > SLIDING_WINDOW  # the chain 0-1-4-7-9-...-15 is deeper than the window


def _path(parents: list[int], node: int) -> list[int]:
    out = [node]
    while parents[out[-1]] != -1:
        out.append(parents[out[-1]])
    return out[::-1]


def _tree_tokens(vocab: int, n: int, seed: int = 5) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("prefix_len", [3, 20])
@pytest.mark.parametrize("kind", KINDS)
def test_tree_forward_equals_each_path(kind, prefix_len):
    tgt = tiny_target(kind)
    prefix = PROMPT[:prefix_len]
    tokens = _tree_tokens(tgt.vocab_size, len(PARENTS))
    cache = tgt.new_cache()
    tgt.forward(torch.tensor([prefix]), cache)
    d = tree.depths(PARENTS)
    hidden, _ = tgt.forward(torch.tensor([tokens]), cache, PARENTS, d, tree.ancestor_mask(PARENTS))  # (1, N, H)
    assert cache.get_seq_length() == prefix_len + len(PARENTS)
    logits = tgt.logits(hidden[0])
    model = tiny_model(kind)
    for node in range(len(PARENTS)):
        seq = prefix + [tokens[i] for i in _path(PARENTS, node)]
        # the adapter's own chain path, fresh cache, prefix then the path
        fresh = tgt.new_cache()
        tgt.forward(torch.tensor([prefix]), fresh)
        h_path, _ = tgt.forward(torch.tensor([seq[prefix_len:]]), fresh)
        torch.testing.assert_close(hidden[0, node], h_path[0, -1], rtol=1e-4, atol=1e-4)
        # and the stock HF forward without a cache (HF's own causal / sliding masks)
        with torch.no_grad():
            ref = model(torch.tensor([seq])).logits[0, -1]
        torch.testing.assert_close(logits[node], ref, rtol=1e-4, atol=1e-4)


def test_tree_forward_returns_layer_taps(tiny_llama):
    """output_layers concatenates the requested hidden states (EAGLE-3 style taps) in the order asked."""
    tgt = tiny_llama
    cache = tgt.new_cache()
    h, taps = tgt.forward(torch.tensor([PROMPT]), cache, output_layers=(0, 2))
    assert taps.shape == (1, len(PROMPT), 2 * tgt.hidden_size)
    with torch.no_grad():
        out = tgt.model(torch.tensor([PROMPT]), output_hidden_states=True)
    torch.testing.assert_close(taps[..., : tgt.hidden_size], out.hidden_states[0])
    torch.testing.assert_close(h, out.hidden_states[-1])


def test_chain_tree_equals_plain_chain(tiny_gemma3):
    """A tree that is a chain gives the same result as the chain path of forward() (parents=None)."""
    tgt = tiny_gemma3
    chain = [-1] + list(range(10))
    tokens = _tree_tokens(tgt.vocab_size, len(chain), seed=9)
    a, b = tgt.new_cache(), tgt.new_cache()
    tgt.forward(torch.tensor([PROMPT]), a)
    tgt.forward(torch.tensor([PROMPT]), b)
    ha, _ = tgt.forward(torch.tensor([tokens]), a, chain, tree.depths(chain), tree.ancestor_mask(chain))
    hb, _ = tgt.forward(torch.tensor([tokens]), b)
    torch.testing.assert_close(ha, hb, rtol=1e-5, atol=1e-5)
