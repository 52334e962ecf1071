"""Start-up timing choices (core/kernels.py): the faster candidate wins, fp32 wins a tie, and load_target loads
the model in the dtype the timing chose (and records why), while an explicit dtype is never overridden."""
from __future__ import annotations

import time

import pytest
import torch

from conftest import tiny_model
from core import kernels, models


def test_fastest_ranks_a_slow_candidate_last():
    best = kernels.fastest({"quick": lambda: None, "slow": lambda: time.sleep(0.004)}, rounds=3)
    assert best["quick"] < best["slow"] and best["slow"] >= 0.004


@pytest.mark.parametrize("ms,expected", [({"bf16": 5.0, "fp32": 9.0}, torch.bfloat16),
                                         ({"bf16": 9.0, "fp32": 5.0}, torch.float32),
                                         ({"bf16": 5.0, "fp32": 5.0}, torch.float32)])  # a tie: the exact one
def test_fastest_cpu_dtype_takes_the_faster(monkeypatch, ms, expected):
    monkeypatch.setattr(kernels, "_step_seconds", lambda dt, *a: ms[{torch.bfloat16: "bf16"}.get(dt, "fp32")] / 1e3)
    dt, timing = kernels.fastest_cpu_dtype(tiny_model("llama").config)
    assert dt == expected and timing == pytest.approx(ms)


def test_fastest_cpu_dtype_times_real_products():
    """Unpatched: both dtypes get a positive estimate for a model's shapes and the smaller one is chosen."""
    dt, timing = kernels.fastest_cpu_dtype(tiny_model("gemma3").config, rounds=1)
    assert set(timing) == {"bf16", "fp32"} and min(timing.values()) > 0
    assert dt == (torch.bfloat16 if timing["bf16"] < timing["fp32"] else torch.float32)


@pytest.mark.parametrize("fast", ["bf16", "fp32"])
def test_load_target_loads_the_timed_dtype(tmp_path, monkeypatch, fast):
    from test_generate_cli import word_tokenizer

    tiny_model("llama").save_pretrained(tmp_path / "m")
    word_tokenizer().save_pretrained(tmp_path / "m")
    ms = {"bf16": 3.0, "fp32": 7.0} if fast == "bf16" else {"bf16": 7.0, "fp32": 3.0}
    monkeypatch.setattr(kernels, "_step_seconds", lambda dt, *a: ms[{torch.bfloat16: "bf16"}.get(dt, "fp32")] / 1e3)
    target, _ = models.load_target(str(tmp_path / "m"), device="cpu")
    assert target.dtype == {"bf16": torch.bfloat16, "fp32": torch.float32}[fast]
    assert target.dtype_timing == pytest.approx(ms)
    explicit, _ = models.load_target(str(tmp_path / "m"), device="cpu", dtype="bf16" if fast == "fp32" else "fp32")
    assert explicit.dtype != target.dtype and explicit.dtype_timing is None  # a named dtype is never timed


def test_cpu_description_names_the_processor():
    desc = kernels.cpu_description()
    assert isinstance(desc, str)
    if desc:  # Linux: "<model name> · <widest bf16-relevant feature>"
        assert desc.split(" · ")[-1] in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") or "·" not in desc


def test_the_app_says_which_dtype_was_timed():
    from types import SimpleNamespace

    from app.startup import dtype_note

    timed = SimpleNamespace(dtype=torch.float32, dtype_timing={"bf16": 837.3, "fp32": 290.9})
    assert dtype_note(timed) == "fp32; timed here: bf16 837 ms, fp32 291 ms per step + verify"
    assert dtype_note(timed, short=True) == "fp32 (timed faster here)"
    assert dtype_note(SimpleNamespace(dtype=torch.bfloat16, dtype_timing=None)) == "bf16"  # named: no timing
