"""Hardening of loading: remote code runs only when asked (core.pipeline passes trust_remote_code through, off by
default), and a head folder whose pytorch_model.bin carries code is refused without running it (weights only)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch


def test_trust_remote_code_off_unless_asked(monkeypatch):
    from core import pipeline

    seen = []

    def fake_load(name=None, device=None, dtype=None, trust_remote_code=False):
        seen.append(trust_remote_code)
        raise ValueError("stop here")

    monkeypatch.setattr(pipeline, "load_target", fake_load)
    for kw in ({}, {"trust_remote_code": True}):
        with pytest.raises(ValueError):
            pipeline.build_decoders("org/model", **kw)
    assert seen == [False, True]


class _Payload:
    """A pickle that creates a marker folder when unpickled: what a hostile pytorch_model.bin could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.makedirs, (str(self.marker),)


def test_a_pickled_payload_in_a_head_is_refused_and_never_runs(tmp_path):
    """A head folder whose pytorch_model.bin carries code (not tensors): loading refuses it and the code never runs
    (torch.load with weights_only=True); a folder with model.safetensors loads from it."""
    from core.drafters.draft_head import HeadConfig, init_head, load_head, save_head
    from core.drafters.heads import load_any_head

    save_head(init_head(HeadConfig(64, 128, 4, 2, 128)), tmp_path / "ok", dtype=torch.float32)
    assert load_head(tmp_path / "ok").trained
    bad = tmp_path / "bad"
    save_head(init_head(HeadConfig(64, 128, 4, 2, 128)), bad, dtype=torch.float32)
    (bad / "model.safetensors").unlink()
    marker = tmp_path / "payload_ran"
    torch.save({"fc.weight": _Payload(marker)}, bad / "pytorch_model.bin")
    for load in (load_head, load_any_head):
        with pytest.raises(Exception, match="(?i)weights only|unpickl|unsupported global"):
            load(bad)
    assert not marker.exists()
