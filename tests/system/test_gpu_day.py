"""scripts/gpu_day.sh, the one GPU command, cannot rot: its CPU dry run (reduced sizes, the cuda tests collected)
runs here through the bash command with gradio made unimportable, as on the GPU machine, and its report carries
every field docs/trust.md §5 names; a spent budget and bad input fail."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
gpu_day = load_script("gpu_day")
PRESETS = ("qwen2.5-coder-0.5b-instruct", "gemma-3-270m", "smollm2-135m-instruct")


def test_the_dry_run_writes_the_full_report_without_gradio(tmp_path):
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text("import sys\nsys.modules['gradio'] = None\n")
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(tmp_path / "block"), OUT=str(tmp_path / "out"))
    proc = subprocess.run(["bash", "scripts/gpu_day.sh", "--device", "cpu", "--budget-s", "900"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "gpu_day.json").read_text())
    assert report["failures"] == [] and report["env"]["gradio_installed"] is False
    tests = report["tests"]
    assert tests["ok"] and not tests["ran"] and tests["counts"]["collected"] > 10
    assert "app_handler" in tests["deselected_for"] and (tmp_path / "out" / "pytest_cuda.log").is_file()
    assert set(report["archs"]) == {*PRESETS, "llama-3.1-8b"}
    for name, arch in report["archs"].items():
        assert set(arch["verify_ms"]) == {"1", "4", "16"} and all(v > 0 for v in arch["verify_ms"].values())
        assert ("fp32" in arch) == (name in PRESETS)
        for race in arch["races"].values():
            assert race["plain_step_ms"] > 0 and race["draft_ms"] > 0 and race["tau"] >= 1
            assert race["identical"] or race["divergence_near_tie"]
    assert all(report["archs"][n]["fp32"]["identical"] for n in PRESETS)
    assert set(report["archs"]["gemma-3-270m"]["races"]) == {"gemma-3-270m", "gemma-3-270m-medusa"}
    heads = {p["head"]: p for p in report["predictions"]}
    assert set(heads) == {*PRESETS, "gemma-3-270m-medusa"}
    assert all(p["cpu_tau"] > 1 and p["predicted_speedup"] > 0 and p["break_even_tau"] > 0 for p in heads.values())
    txt = (tmp_path / "out" / "gpu_day.txt").read_text()
    assert txt.rstrip().endswith("PASS") and "predicted: gemma-3-270m-medusa" in txt


def test_a_spent_budget_fails_and_names_what_was_left_out(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_day, "cuda_tests", lambda *a: {"ok": True, "summary": "1 passed", "rc": 0})
    assert gpu_day.main(["--device", "cpu", "--budget-s", "0", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "gpu_day.json").read_text())
    assert report["archs"]["llama-3.1-8b"] == {"skipped": "time budget spent"} and len(report["failures"]) == 4
    assert "FAIL (4)" in capsys.readouterr().out


def test_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    assert gpu_day.main(["--device", "tpu", "--out", str(tmp_path)]) == 2
    assert gpu_day.main(["--archs", "gpt-2", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpu_day: error: --device must be cuda or cpu, got 'tpu'",
                   "gpu_day: error: unknown architecture 'gpt-2' (known: " + ", ".join(gpu_day.ARCHS) + ")"]


def test_pytest_summary_lines_are_counted():
    assert gpu_day.pytest_counts("20 passed, 1 skipped, 2 deselected in 9.10s")["passed"] == 20
    c = gpu_day.pytest_counts("1 failed, 19 passed, 2 errors in 30.0s")
    assert (c["failed"], c["passed"], c["error"]) == (1, 19, 2)
    assert gpu_day.pytest_counts("21/23 tests collected (2 deselected) in 5.5s")["collected"] == 21
