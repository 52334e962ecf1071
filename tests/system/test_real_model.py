"""The packaged Gemma 3 270M (the base-model preset, named explicitly: the default model is the chat preset, and one
packaged model keeps this file quick): loads offline, and greedy EAGLE-2 with an untrained head equals the baseline.

Runs by default (CI included); the first call builds the dense cache from the installed GGUF package (about a
minute). Deselect with `-m "not real_model"` for a quick local loop.
"""
from __future__ import annotations

import pytest
import torch

from conftest import run
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.draft_head import HeadConfig, init_head
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder
from core.models.target import load_target

GEMMA = "gemma-3-270m"

pytestmark = pytest.mark.real_model

PROMPTS = [
    "The capital of France is",
    "Write a short poem about the sea.\n",
    "def fibonacci(n):\n",
]
N_NEW = 64


@pytest.fixture(scope="module")
def gemma():
    return load_target(GEMMA, device="cpu", dtype="fp32")


def test_gemma_preset_loads(gemma):
    target, tok = gemma
    assert target.name == GEMMA
    assert target.config.model_type == "gemma3_text"
    assert (target.hidden_size, target.vocab_size, target.sliding_window) == (640, 262144, 512)
    assert target.dtype == torch.float32 and 1 in target.eos_ids
    ids = tok("Hello world").input_ids
    assert ids[0] == tok.bos_token_id == 2


def test_greedy_eagle_equals_baseline_on_gemma(gemma):
    target, tok = gemma
    vocab_ids = torch.arange(4096)  # reduced draft vocabulary keeps the untrained head's drafting cheap
    head = init_head(HeadConfig.for_target(target.hidden_size, target.vocab_size, len(vocab_ids)), vocab_ids)
    eagle = Eagle2Decoder(target, EagleDrafter(head, target))
    base = BaselineDecoder(target)
    cfg = DecodeConfig(max_new_tokens=N_NEW, tree=TreeConfig(4, 2, 2))  # small: each node costs a 262k-row LM head
    lengths = []
    for prompt in PROMPTS:
        ids = tok(prompt).input_ids
        expected, _ = run(base, ids, cfg)
        got, events = run(eagle, ids, cfg)
        assert got == expected, prompt
        lengths.append(len(expected))
        assert all(t not in target.eos_ids for t in expected[:-1])
    assert max(lengths) == N_NEW  # at least one prompt ran the full length


def test_shipped_medusa_head_is_lossless_and_drafts(gemma):
    """The shipped Medusa head (static/heads/gemma-3-270m-medusa) loads through the registry, decodes exactly the
    baseline's tokens in fp32 through the same loop, and its guesses are accepted (tau above 1)."""
    from core.engine.events import summarize
    from core.drafters.heads import load_any_head, make_drafter
    from core.drafters.medusa import MedusaHead
    from core.pipeline import default_medusa_head

    target, tok = gemma
    path = default_medusa_head(GEMMA)
    assert path is not None, "static/heads/gemma-3-270m-medusa is missing"
    head = load_any_head(path)
    assert isinstance(head, MedusaHead) and head.trained and head.config.num_heads == 6
    medusa = Eagle2Decoder(target, make_drafter(head, target))
    base = BaselineDecoder(target)
    cfg = DecodeConfig(max_new_tokens=N_NEW, tree=TreeConfig(8, 4, 3, lookup=0))
    taus = []
    for prompt in PROMPTS:
        ids = tok(prompt).input_ids
        expected, _ = run(base, ids, cfg)
        got, events = run(medusa, ids, cfg)
        assert got == expected, prompt
        taus.append(summarize(events).tau)
    assert max(taus) > 1.2, taus
