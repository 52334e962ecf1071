"""Re-read saved bench JSONs and count their divergences under the old and the current near-tie rule.

The bench stores, for every row that differs from the baseline, both runs' top-2 margins at the first differing
token and the tolerance D (NEAR_TIE_ULPS ulps at the larger top-1 logit; core/engine/exactness.py). That is all either rule
needs, so earlier runs are re-classified without decoding again:

- old rule: near tie when min(recorded margins) <= D (one recorded margin could decide alone);
- new rule: near tie when both margins are recorded and m_baseline + m_method <= D (core.engine.exactness.is_near_tie).

    python -m scripts.reclassify_near_ties [results/*.json ...] [--dtype bfloat16] [--markdown]

Prints one line (or markdown row) per file and method with mismatches: compared prompts, mismatches, unexplained
under the old rule, unexplained under the new rule, and the largest margin sum seen in ulps at the top logit.
Exits 0; it reports, it does not judge.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


from core.engine.exactness import NEAR_TIE_ULPS, is_near_tie  # noqa: E402


def old_rule(d: dict) -> bool:
    """The rule before: the smaller recorded margin within the tolerance; with one margin missing, the other alone."""
    known = [m for m in (d.get("baseline_margin"), d.get("method_margin")) if m is not None]
    return d.get("tolerance") is not None and bool(known) and min(known) <= d["tolerance"]


def new_rule(d: dict) -> bool:
    return is_near_tie(d.get("baseline_margin"), d.get("method_margin"), d.get("tolerance"))


def margin_sum_ulps(d: dict) -> float | None:
    """m_baseline + m_method in ulps at the top-1 logit (tolerance / NEAR_TIE_ULPS is that ulp), or None."""
    mb, mm, tol = d.get("baseline_margin"), d.get("method_margin"), d.get("tolerance")
    if mb is None or mm is None or not tol:
        return None
    return (mb + mm) / (tol / NEAR_TIE_ULPS)


def reclassify(result: dict) -> dict[str, dict]:
    """{method: {compared, mismatches, old_unexplained, new_unexplained, max_sum_ulps}} of one bench JSON (pure)."""
    out: dict[str, dict] = {}
    for r in result.get("per_prompt", []):
        if r.get("identical_to_baseline") is None:
            continue
        s = out.setdefault(r["method"], {"compared": 0, "mismatches": 0, "old_unexplained": 0, "new_unexplained": 0,
                                         "max_sum_ulps": None})
        s["compared"] += 1
        if r["identical_to_baseline"]:
            continue
        d = r.get("divergence") or {}
        s["mismatches"] += 1
        s["old_unexplained"] += not old_rule(d)
        s["new_unexplained"] += not new_rule(d)
        u = margin_sum_ulps(d)
        if u is not None:
            s["max_sum_ulps"] = u if s["max_sum_ulps"] is None else max(s["max_sum_ulps"], u)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="*", help="bench JSONs (default: results/*.json)")
    p.add_argument("--dtype", default="bfloat16", help="only runs in this dtype ('' = all)")
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    files = [Path(f) for f in a.files] or sorted((root / "results").glob("*.json"))
    total = {"mismatches": 0, "old_unexplained": 0, "new_unexplained": 0}
    if a.markdown:
        print("| file | method | compared | mismatches | unexplained (old rule) | unexplained (sum rule) "
              "| max m_b + m_m (ulps) |\n|---|---|---|---|---|---|---|")
    for f in files:
        try:
            result = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(result, dict) or "per_prompt" not in result:
            continue
        if a.dtype and result.get("config", {}).get("dtype") != a.dtype:
            continue
        for m, s in reclassify(result).items():
            if not s["mismatches"]:
                continue
            for k in total:
                total[k] += s[k]
            mx = "–" if s["max_sum_ulps"] is None else f"{s['max_sum_ulps']:g}"
            if a.markdown:
                print(f"| {f.name} | {m} | {s['compared']} | {s['mismatches']} | {s['old_unexplained']} | "
                      f"{s['new_unexplained']} | {mx} |")
            else:
                print(f"{f.name:45s} {m:20s} compared {s['compared']:3d} mismatches {s['mismatches']:3d} "
                      f"unexplained old {s['old_unexplained']:3d} new {s['new_unexplained']:3d} max sum {mx} ulps")
    print(f"total: mismatches {total['mismatches']}, unexplained under the old rule {total['old_unexplained']}, "
          f"under the sum rule {total['new_unexplained']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
