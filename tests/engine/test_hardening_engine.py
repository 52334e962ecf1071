"""Hardening of the decoding loop: a head whose draft scores are NaN no longer ends a request; each such step
verifies the root alone, the output is the target's own, the steps say why, and the caches are freed. (The same head
in the app: tests/app/test_hardening_app.py.)"""
from __future__ import annotations

import torch
from fakes import tiny_stack

from core.engine.config import DecodeConfig


PROMPT = "Once upon a time"


def nan_stack():
    tok, baseline, eagle = tiny_stack()
    with torch.no_grad():
        for p in eagle.drafter.head.parameters():
            p.fill_(float("nan"))
    return tok, baseline, eagle


def test_nan_head_answers_with_the_targets_own_token_and_frees_caches(monkeypatch):
    """A head whose draft scores are NaN no longer ends the request: each such step verifies the root alone, so the
    output is the target's own greedy text (equal to the baseline's), the steps say why, and caches are freed."""
    from core.engine import kv_cache
    from core.engine.eagle import NON_FINITE_DRAFT_NOTE

    freed = []
    real_free = kv_cache.free
    monkeypatch.setattr(kv_cache, "free", lambda c: (freed.append(c), real_free(c)))
    tok, baseline, eagle = nan_stack()
    cfg = DecodeConfig(max_new_tokens=8)
    events = list(eagle.generate(list(tok.encode(PROMPT)), cfg))
    base = [t for e in baseline.generate(list(tok.encode(PROMPT)), cfg) for t in e.new_token_ids]
    assert [t for e in events for t in e.new_token_ids] == base
    assert any(e.note == NON_FINITE_DRAFT_NOTE for e in events[1:])
    assert all(len(e.tree) <= 1 + 10 for e in events[1:])  # the root (and at most the lossless lookup chain)
    assert freed and all(not layer.is_initialized or layer.keys is None or layer.keys.numel() == 0
                         for c in freed for layer in c.layers)
