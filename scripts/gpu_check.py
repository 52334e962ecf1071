"""The device check with pass criteria: exits non-zero unless every claim below holds on the device it runs on.

    python -m scripts.gpu_check [--device cuda|cpu] [--n 4] [--max-new-tokens 48] [--model M] [--questions FILE]
    python -m scripts.gpu_check --device cpu --write-reference   # record the CPU's tau for the band check
    bash scripts/gpu_check.sh [--device cpu] ...                  # the same, with the cuda tests first

Checks, each printed as PASS or FAIL with its numbers:
1. fp32, T=0: every drafter equals plain decoding token for token on N real prompts (the real model, first N
   Spec-Bench prompts of the test split): EAGLE-1/2 with lookup (`eagle2`), the head alone (`eagle2-head`), the
   head as a chain, context lookup alone, the shipped Medusa head (where the model has one), and an untrained
   EAGLE-3 head written for the
   target (`eagle2-head-b`; any head is lossless, so an untrained one checks the EAGLE-3 path). 0 mismatches.
2. bf16, T=0: every divergence from plain decoding is a numerical near tie under core/engine/exactness.py's rule (both
   margins recorded and their sum within the rounding change of a logit difference). 0 unexplained.
3. The sampled chi-square tests pass (tests/engine/test_sampling.py's distribution tests on CPU; tests/system/test_cuda.py's
   sampled and seeded-sampling tests on CUDA).
4. tau of `eagle2` and `eagle2-head` (fp32, T=0) lies within TAU_BAND (relative) of the CPU's recorded tau for the
   same model, prompts and length (results/gpu/gpu_check_reference.json, written by --write-reference on a CPU).
   The outputs are identical, so tau can differ only where the head's draft scores round differently on the device.
Outputs: artifacts/gpu_check/{fp32,bf16}.json and check.json (the verdicts).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a file (python scripts/X.py) as well as a module

from core.cli import Parser  # noqa: E402

TAU_BAND = 0.10  # device tau within 10 % of the CPU's (same outputs; only draft-score rounding differs)
REFERENCE = ROOT / "results" / "gpu" / "gpu_check_reference.json"
METHODS = ("baseline", "eagle2", "eagle2-head", "eagle2-chain", "lookup", "medusa", "eagle2-head-b")
TAU_METHODS = ("eagle2", "eagle2-head")
EAGLE3_DRAFT_VOCAB = 4096  # the untrained EAGLE-3 head drafts over the first 4096 ids (a small LM head)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(prog="scripts/gpu_check.py", description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--n", type=int, default=4, help="real prompts per check")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--model", default="gemma-3-270m",
                   help="target (default: the packaged Gemma 3 270M, the model every drafter is shipped for, Medusa too)")
    p.add_argument("--questions", default=None, help="Spec-Bench jsonl (default: ../shared/data or shared/data)")
    p.add_argument("--out", default=str(ROOT / "artifacts" / "gpu_check"))
    p.add_argument("--reference", default=str(REFERENCE))
    p.add_argument("--write-reference", action="store_true", help="record this run's fp32 tau as the CPU reference")
    p.add_argument("--skip-chi-square", action="store_true", help="leave check 3 out (reported as skipped)")
    return p.parse_args(argv)


# ------------------------------------------------------------------------------------------ verdicts (pure)


def fp32_failures(result: dict) -> list[str]:
    """Check 1: every method of an fp32 T=0 bench run has 0 mismatches against baseline."""
    out = []
    for m, s in result["summary"].items():
        if m == "baseline":
            continue
        if s.get("mismatches") is None:
            out.append(f"fp32: {m} was not compared with baseline")
        elif s["mismatches"]:
            qs = [r["question_id"] for r in result["per_prompt"] if r["method"] == m and r["identical_to_baseline"] is False]
            out.append(f"fp32: {m} differs from plain decoding on {s['mismatches']} prompt(s) {qs}")
    return out


def bf16_failures(result: dict) -> list[str]:
    """Check 2: every bf16 divergence is a near tie under the current rule (recomputed from the stored margins)."""
    from core.engine.exactness import is_near_tie

    out = []
    for r in result["per_prompt"]:
        if r.get("identical_to_baseline") is not False:
            continue
        d = r.get("divergence") or {}
        if not is_near_tie(d.get("baseline_margin"), d.get("method_margin"), d.get("tolerance")):
            out.append(f"bf16: {r['method']} on prompt {r['question_id']} diverges at token {d.get('index')} with "
                       f"margins {d.get('baseline_margin')} + {d.get('method_margin')} > tolerance "
                       f"{d.get('tolerance')}: not a near tie")
    return out


def tau_failures(result: dict, reference: dict | None, settings: dict, band: float = TAU_BAND) -> list[str]:
    """Check 4: each TAU_METHODS tau within `band` (relative) of the reference recorded for the same settings."""
    if reference is None or reference.get("settings") != settings:
        return [f"tau: no CPU reference for {settings} (run python -m scripts.gpu_check --device cpu --write-reference)"]
    out = []
    for m in TAU_METHODS:
        got, want = result["summary"].get(m, {}).get("tau"), reference["tau"].get(m)
        if got is None or want is None:
            out.append(f"tau: {m} missing (device {got}, CPU {want})")
        elif abs(got - want) > band * want:
            out.append(f"tau: {m} {got:.3f} on the device vs {want:.3f} on the CPU, outside ±{band:.0%}")
    return out


# ------------------------------------------------------------------------------------------ running


def questions_file(given: str | None) -> str:
    """--questions, else $EAGLE_QUESTIONS, else Spec-Bench's file in data/ or the data folder (core/paths.py)."""
    import os

    from core.paths import data_dir

    for f in [given, os.environ.get("EAGLE_QUESTIONS"), str(ROOT / "data" / "spec_bench_questions.jsonl"),
              str(data_dir() / "spec_bench_questions.jsonl")]:
        if f and Path(f).is_file():
            return f
    raise SystemExit("gpu_check: spec_bench_questions.jsonl not found (give --questions or set EAGLE_QUESTIONS)")


def eagle3_folder(model: str | None, out: Path) -> Path:
    """An untrained EAGLE-3 head sized for the target, written once per model under `out` (any head is lossless)."""
    import torch
    from transformers import AutoConfig

    from core.drafters.draft_head import HeadConfig
    from core.drafters.eagle3_head import Eagle3Config, init_eagle3_head, save_eagle3_head
    from core.models.target import resolve_model

    folder = out / f"eagle3_untrained_{Path(str(model or 'default')).name}"  # one per target: sizes differ
    if (folder / "model.safetensors").exists():
        return folder
    cfg = AutoConfig.from_pretrained(resolve_model(model)).get_text_config(decoder=True)
    vocab = cfg.vocab_size
    h = HeadConfig.for_target(cfg.hidden_size, vocab)
    c = Eagle3Config(hidden_size=h.hidden_size, intermediate_size=h.intermediate_size,
                     num_attention_heads=h.num_attention_heads, num_key_value_heads=h.num_key_value_heads,
                     vocab_size=vocab, draft_vocab_size=min(EAGLE3_DRAFT_VOCAB, vocab),
                     target_hidden_size=cfg.hidden_size, head_dim=h.hd)
    save_eagle3_head(init_eagle3_head(c, torch.zeros(c.draft_vocab_size, dtype=torch.long), seed=0), folder)
    return folder


def run_bench(argv: list[str]) -> dict:
    """core.bench in this process (its JSON is written too); raises SystemExit on a bench error."""
    from core.bench import cli as bench

    if bench.main(argv) != 0:
        raise SystemExit(f"gpu_check: the bench failed: {' '.join(argv)}")
    return json.loads(Path(argv[argv.index("--json") + 1]).read_text())


def chi_square(device: str) -> tuple[bool, str]:
    """Check 3 as a pytest run: the sampled distribution tests for the device; (passed, last line)."""
    if device.startswith("cuda"):
        args = ["-m", "cuda", "tests/system/test_cuda.py", "-k", "sampled or seeded"]
    else:
        args = ["tests/engine/test_sampling.py", "-k", "matches_target_distribution"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    return proc.returncode == 0, lines[-1] if lines else proc.stderr.strip()[-200:]


def check(a: argparse.Namespace, bench: Callable[[list[str]], dict] = run_bench,
          chi: Callable[[str], tuple[bool, str]] = chi_square) -> dict:
    """Run the four checks; returns {"checks": {name: {"ok", "detail"}}, "failures": [...]}."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    q = questions_file(a.questions)
    head_b = eagle3_folder(a.model, out)
    from core.pipeline import default_medusa_head

    methods = [m for m in METHODS if m != "medusa" or default_medusa_head(a.model)]  # Medusa where one is shipped
    common = ["--questions", q, "--split", "test", "--limit", str(a.n), "--max-new-tokens", str(a.max_new_tokens),
              "--methods", ",".join(methods), "--head-b", str(head_b), "--device", a.device, "--tree", "16,6,8",
              "--head-tree", "16,6,8"] + (["--model", a.model] if a.model else [])
    results = {dt: bench([*common, "--dtype", dt, "--json", str(out / f"{dt}.json")]) for dt in ("fp32", "bf16")}
    settings = {"model": results["fp32"]["config"]["model"], "n": a.n, "max_new_tokens": a.max_new_tokens,
                "split": "test", "tree": "16,6,8"}
    checks: dict[str, dict] = {}
    fails = fp32_failures(results["fp32"])
    checks["fp32 T=0: every drafter equals plain decoding"] = {"ok": not fails, "detail": fails or [
        f"{m}: 0 of {s['n_prompts']} differ" for m, s in results["fp32"]["summary"].items() if m != "baseline"]}
    fails = bf16_failures(results["bf16"])
    checks["bf16 T=0: every divergence is a near tie"] = {"ok": not fails, "detail": fails or [
        f"{m}: {s['mismatches']} differ, 0 unexplained" for m, s in results["bf16"]["summary"].items()
        if m != "baseline"]}
    if a.skip_chi_square:
        checks["sampled chi-square tests"] = {"ok": True, "detail": ["skipped (--skip-chi-square)"]}
    else:
        ok, line = chi(a.device)
        checks["sampled chi-square tests"] = {"ok": ok, "detail": [line]}
    taus = {m: results["fp32"]["summary"][m]["tau"] for m in TAU_METHODS}
    if a.write_reference:
        Path(a.reference).write_text(json.dumps({"settings": settings, "tau": taus,
                                                 "device": results["fp32"]["config"]["device"],
                                                 "cpu": results["fp32"]["config"]["machine"]["cpu"]}, indent=1) + "\n")
    ref_path = Path(a.reference)
    reference = json.loads(ref_path.read_text()) if ref_path.exists() else None
    fails = tau_failures(results["fp32"], reference, settings)
    checks[f"tau within ±{TAU_BAND:.0%} of the CPU's"] = {"ok": not fails, "detail": fails or [
        f"{m}: {taus[m]:.3f} here vs {reference['tau'][m]:.3f} on the CPU" for m in TAU_METHODS]}
    verdict = {"device": results["fp32"]["config"]["device"], "settings": settings, "checks": checks,
               "failures": [f for c in checks.values() if not c["ok"] for f in c["detail"]]}
    (out / "check.json").write_text(json.dumps(verdict, indent=1) + "\n")
    return verdict


def main(argv: list[str] | None = None, **hooks) -> int:
    a = parse_args(argv)
    verdict = check(a, **hooks)
    print(f"[gpu_check] device {verdict['device']}, {a.n} prompts x {a.max_new_tokens} tokens")
    for name, c in verdict["checks"].items():
        print(f"[gpu_check] {'PASS' if c['ok'] else 'FAIL'}  {name}")
        for line in c["detail"]:
            print(f"[gpu_check]        {line}")
    print(f"[gpu_check] {'all checks passed' if not verdict['failures'] else str(len(verdict['failures'])) + ' failure(s)'}")
    return 0 if not verdict["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
