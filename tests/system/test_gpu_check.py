"""scripts/gpu_check.py can fail: each planted fault (a fp32 mismatch, a bf16 divergence no rounding explains, a
failed chi-square run, tau outside the band) makes it exit non-zero, a clean run passes, and the whole check runs
for real on a CPU (tiny model, real bench)."""
from __future__ import annotations

import copy
import json

import pytest

from conftest import load_script, tiny_model

gpu_check = load_script("gpu_check")

SETTINGS = {"model": "tiny", "n": 2, "max_new_tokens": 8, "split": "test", "tree": "16,6,8"}


def row(qid, method, same=True, divergence=None, tau=2.0):
    r = {"question_id": qid, "category": "qa", "method": method, "new_tokens": 8, "seconds": 1.0, "tokens_per_s": 8.0,
         "target_forwards": 4, "tau": tau, "identical_to_baseline": same, "first_mismatch": None if same else 3}
    if divergence:
        r["divergence"] = divergence
    return r


def result(rows) -> dict:
    from core.bench.report import summarize_rows

    return {"config": {"model": "tiny", "device": "cpu", "machine": {"cpu": "test"}}, "per_prompt": rows,
            "summary": summarize_rows(rows)}


def clean(dtype: str) -> dict:
    rows = []
    for q in (1, 2):
        rows.append(row(q, "baseline", tau=1.0))
        tie = {"index": 3, "baseline_margin": 0.125, "method_margin": 0.25, "tolerance": 2.0, "near_tie": True}
        same = dtype == "fp32" or q == 1
        rows += [row(q, m, same, None if same else tie) for m in ("eagle2", "eagle2-head")]
    return result(rows)


@pytest.fixture
def folders(tmp_path):
    from test_generate_cli import word_tokenizer

    tiny_model("llama").save_pretrained(tmp_path / "model")
    word_tokenizer().save_pretrained(tmp_path / "model")
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps({"question_id": i, "category": "qa", "turns": [f"w{i} w3 w17 w42 w5 w9"]}) + "\n"
                         for i in (1, 2, 3, 4)))
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"settings": SETTINGS, "tau": {"eagle2": 2.0, "eagle2-head": 2.0}}))
    return tmp_path, ["--device", "cpu", "--n", "2", "--max-new-tokens", "8", "--model", str(tmp_path / "model"),
                      "--questions", str(q), "--out", str(tmp_path / "out"), "--reference", str(ref)]


def fake_bench(fp32: dict, bf16: dict):
    def bench(argv):
        r = copy.deepcopy(fp32 if argv[argv.index("--dtype") + 1] == "fp32" else bf16)
        r["config"]["model"] = "tiny"
        return r
    return bench


def test_a_clean_run_passes(folders, capsys):
    _, argv = folders
    assert gpu_check.main(argv, bench=fake_bench(clean("fp32"), clean("bf16")), chi=lambda d: (True, "12 passed")) == 0
    out = capsys.readouterr().out
    assert out.count("PASS") == 4 and "all checks passed" in out


def test_a_planted_fp32_mismatch_fails(folders, capsys):
    _, argv = folders
    fp32 = clean("fp32")
    fp32["per_prompt"][1] = row(1, "eagle2", same=False)
    fp32 = result(fp32["per_prompt"])
    assert gpu_check.main(argv, bench=fake_bench(fp32, clean("bf16")), chi=lambda d: (True, "ok")) == 1
    out = capsys.readouterr().out
    assert "FAIL  fp32 T=0" in out and "eagle2 differs from plain decoding on 1 prompt(s) [1]" in out


def test_a_bf16_divergence_no_rounding_explains_fails(folders, capsys):
    """The review's case: one run's margin 0.1, the other's 9.0 at a top logit of 20 (tolerance 2.0)."""
    _, argv = folders
    bf16 = clean("bf16")
    bad = {"index": 5, "baseline_margin": 0.1, "method_margin": 9.0, "tolerance": 2.0, "near_tie": True}
    bf16["per_prompt"][1] = row(1, "eagle2", same=False, divergence=bad)
    assert gpu_check.main(argv, bench=fake_bench(clean("fp32"), result(bf16["per_prompt"])),
                          chi=lambda d: (True, "ok")) == 1
    assert "FAIL  bf16 T=0" in capsys.readouterr().out


def test_a_failed_chi_square_run_or_tau_outside_the_band_fails(folders, capsys):
    tmp, argv = folders
    assert gpu_check.main(argv, bench=fake_bench(clean("fp32"), clean("bf16")), chi=lambda d: (False, "1 failed")) == 1
    assert "FAIL  sampled chi-square" in capsys.readouterr().out
    fp32 = clean("fp32")
    for r in fp32["per_prompt"]:
        if r["method"] == "eagle2":
            r["target_forwards"] = 2  # tau 4.0 against the reference's 2.0
    assert gpu_check.main(argv, bench=fake_bench(result(fp32["per_prompt"]), clean("bf16")),
                          chi=lambda d: (True, "ok")) == 1
    assert "outside ±10%" in capsys.readouterr().out
    (tmp / "ref.json").unlink()  # no reference for these settings: the band cannot be checked, which fails
    assert gpu_check.main(argv, bench=fake_bench(clean("fp32"), clean("bf16")), chi=lambda d: (True, "ok")) == 1


def test_the_check_runs_for_real_on_a_cpu(folders, capsys):
    """No fakes: the real bench on a tiny Llama, fp32 and bf16, every drafter (EAGLE-1/2, the head alone and as a
    chain, lookup, an untrained EAGLE-3 head), tau recorded as the reference and then checked against it."""
    tmp, argv = folders
    (tmp / "ref.json").unlink()
    assert gpu_check.main([*argv, "--write-reference", "--skip-chi-square"]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "eagle2-head-b: 0 of 2 differ" in out and "lookup: 0 of 2 differ" in out
    verdict = json.loads((tmp / "out" / "check.json").read_text())
    assert verdict["failures"] == [] and json.loads((tmp / "ref.json").read_text())["settings"]["n"] == 2
