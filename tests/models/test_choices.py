"""Pinned start-up choices (core/models/choices.py): a choices file fixes the dtype and every kernel route, each route is
tested on its own, and two launches with the same file, prompt and seed give the same tokens."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import PROMPT, run, tiny_head, tiny_model
from core.models import choices, kernels
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
from core.drafters.eagle import EagleDrafter
from core.engine.eagle import Eagle2Decoder
from core.models.target import TargetModel

ROOT = Path(__file__).resolve().parents[2]


def pin(tmp_path, **values) -> Path:
    path = tmp_path / "choices.json"
    path.write_text(json.dumps(values))
    choices.use(path)
    return path


def test_pinned_routes_are_used_and_nothing_is_timed(tmp_path, monkeypatch):
    def no_timing(*a, **k):
        raise AssertionError("timed although pinned")

    for name in ("head_choice", "head_kernel", "body_choice"):
        monkeypatch.setattr(kernels, name, no_timing)
    pin(tmp_path, lm_head="vocab_major", lazy_rows=True, body_onednn_rows=[1, 4], draft_head="linear",
        draft_onednn_rows=[2])
    tgt = TargetModel(tiny_model("llama")).accelerate()  # the acceleration step the product runs after loading
    dr = EagleDrafter(tiny_head(tgt), tgt).accelerate()
    assert (tgt.head_kernel, tgt.lazy_rows, tgt.onednn_rows) == ("vocab_major", True, frozenset({1, 4}))
    d = choices.describe(tgt, dr)
    assert d["lm_head"] == "vocab_major" and d["body_onednn_rows"] == [1, 4] and d["source"].startswith("pinned")
    assert d["draft_head"] == dr.head_kernel


def test_a_choices_file_is_written_by_one_run_and_read_by_the_next(tmp_path):
    path = tmp_path / "run.json"
    choices.use(path)  # does not exist yet: this run times and writes
    tgt = TargetModel(tiny_model("llama")).accelerate()
    dr = EagleDrafter(tiny_head(tgt), tgt).accelerate()
    assert choices.save(tgt, dr) == path and choices.save(tgt, dr) is None  # written once, never overwritten
    written = json.loads(path.read_text())
    assert written["lm_head"] == tgt.head_kernel and written["dtype"] == "float32"
    assert choices.use(path) == {k: v for k, v in written.items()}
    assert "pinned" in choices.source()


@pytest.mark.parametrize("bad, msg", [({"dtype": "float8"}, "dtype must be"), ({"lazy_rows": "yes"}, "true or false"),
                                      ({"body_onednn_rows": [0]}, "row counts"), ("[1]", "not a JSON object")])
def test_a_bad_choices_file_is_refused_with_its_name(tmp_path, bad, msg):
    path = tmp_path / "c.json"
    path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
    with pytest.raises(ValueError, match=msg):
        choices.use(path)


def test_a_pinned_kernel_this_machine_lacks_is_refused(tmp_path):
    pin(tmp_path, lm_head="no_such_kernel")
    with pytest.raises(ValueError, match="pinned lm_head 'no_such_kernel' is not available"):
        TargetModel(tiny_model("llama")).accelerate()


def _paths() -> list[tuple]:
    w = tiny_model("llama").get_output_embeddings().weight
    return list(itertools.product(kernels.head_candidates(w), (False, True), ((), kernels.BODY_ROWS)))


@pytest.mark.parametrize("lm_head, lazy, body", _paths())
def test_each_pinned_path_gives_the_plain_paths_tokens(tmp_path, lm_head, lazy, body):
    """fp32 greedy, each route pinned in turn (LM-head kernel x rows on demand x the body's oneDNN route, and the
    drafter's own head kernel and layer route): baseline and EAGLE-2 equal the plain path's tokens."""
    cfg = DecodeConfig(40, tree=TreeConfig(12, 4, 3, lookup=8))
    pin(tmp_path, lm_head="linear", lazy_rows=False, body_onednn_rows=[], draft_head="linear", draft_onednn_rows=[])
    plain = TargetModel(tiny_model("llama")).accelerate()
    ref, _ = run(BaselineDecoder(plain), PROMPT, cfg)
    pin(tmp_path, lm_head=lm_head, lazy_rows=lazy, body_onednn_rows=list(body), draft_head=lm_head,
        draft_onednn_rows=[1, 2, 4, 8] if body else [])
    tgt = TargetModel(tiny_model("llama")).accelerate()
    assert (tgt.head_kernel, tgt.lazy_rows, sorted(tgt.onednn_rows)) == (lm_head, lazy, sorted(body)) or (
        body and not kernels.onednn_head_works(tgt.dtype))
    base, _ = run(BaselineDecoder(tgt), PROMPT, cfg)
    eagle, _ = run(Eagle2Decoder(tgt, EagleDrafter(tiny_head(tgt), tgt).accelerate()), PROMPT, cfg)
    assert base == ref and eagle == ref


def _launch(folder: Path, choices_file: Path, temperature: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop(choices.ENV, None)
    proc = subprocess.run([sys.executable, "-m", "core.generate", "--model", str(folder), "--prompt", "w3 w17 w42 w5",
                           "--max-new-tokens", "24", "--device", "cpu", "--choices", str(choices_file), "--json",
                           "--temperature", str(temperature), "--seed", "7", "--tree", "8,3,2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_two_launches_with_the_same_pinned_choices_give_the_same_tokens(tmp_path):
    """Three processes, --dtype auto on CPU (timed bf16 against fp32 unless pinned): the first times and writes the
    choices file, the next two read it; same prompt and seed -> the same tokens, greedy and sampled, and every
    result records the choices it ran with."""
    from test_generate_cli import word_tokenizer

    tiny_model("llama").save_pretrained(tmp_path / "model")
    word_tokenizer().save_pretrained(tmp_path / "model")
    path = tmp_path / "choices.json"
    for t in (0.0, 1.0):
        runs = [_launch(tmp_path / "model", path, t) for _ in range(2 if t else 3)]
        first = 1 if t == 0.0 else 0
        assert path.exists()
        assert all(r["choices"]["source"].startswith("pinned") for r in runs[first:])
        assert all(r["choices"]["lm_head"] == runs[0]["choices"]["lm_head"] for r in runs)
        assert all(r["token_ids"] == runs[0]["token_ids"] for r in runs), [r["token_ids"] for r in runs]
    assert json.loads(path.read_text())["dtype"] in ("bfloat16", "float32")


def test_run_and_the_info_line_record_the_choices():
    from app.handlers import Playground
    from app.startup import info_line
    from fakes import tiny_stack

    tok, b, e = tiny_stack()
    out = Playground(tok, b, e).run("Once upon a time", 6)
    assert out["choices"]["lm_head"] == "linear" and out["choices"]["source"].startswith("pinned")  # conftest's pin
    assert {"dtype", "lazy_rows", "body_onednn_rows", "draft_head", "draft_onednn_rows"} <= set(out["choices"])
    assert "kernels: LM head linear · body plain · pinned" in info_line(b.target, e)


def test_the_app_takes_a_choices_flag():
    import importlib.util

    spec = importlib.util.spec_from_file_location("app_main", ROOT / "app.py")
    app_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app_py)
    assert app_py.parse_args(["--choices", "run.json"]).choices == "run.json"
    assert app_py.parse_args([]).choices is None
