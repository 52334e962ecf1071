"""Pure Spec-Bench arithmetic over per-prompt rows, and the report renderers (markdown tables, standalone HTML).

Spec-Bench (arXiv 2401.07851, evaluation/speed.py): a prompt's speed = new tokens / wall seconds; a method's speedup
= its mean speed over the prompts / the reference's mean speed over the same prompts (ratio of means, NOT the mean of
per-prompt ratios). tau = sum of new tokens / sum of target forward passes (bonus token included; plain decoding =
1.00). Acceptance figures are pooled over every verify step of every prompt: accept_rate = accepted drafts / drafted
tree tokens, depth_accept[d-1] = share of verify steps whose accepted path reached depth d (unconditional), and
n_alpha[n] = P(path reaches depth n+1 | it reached depth n) (conditional; for `eagle2-chain`, a single chain of the
head, this is EAGLE's n-alpha: acceptance with n self-predicted features in the head's input).

A row is the dict `core.bench` writes to `per_prompt`: question_id, category, method, new_tokens, seconds,
tokens_per_s, target_forwards (None when unknown), tau, identical_to_baseline (None when not compared), and for EAGLE
methods accepted_drafts, drafted_tokens, accept_hist; `in_draft_vocab` (tokens of the output the head's reduced draft
vocabulary contains) for methods whose head has one.

Honest summaries (what a mean hides): each method also gets its speedup over only the prompts whose outputs matched
baseline's (`speedup_vs_*_matched`, with `n_matched`), the median and spread of its per-prompt speedup and tau
(`spread`: median, p10, p90, min, max), the share of accepted drafts copied from the context rather than drafted by
the head (`copied_share`, rows' `accepted_lookup`), and how many outputs end in a loop (`loops`, rows'
`loop_period`, core/engine/loops.py). `honest_table` renders them.
"""
from __future__ import annotations

from typing import Sequence

Row = dict


def _select(rows: Sequence[Row], method: str, category: str | None = None) -> list[Row]:
    return [r for r in rows if r["method"] == method and (category is None or r["category"] == category)]


def mean_tokens_per_s(rows: Sequence[Row], method: str, category: str | None = None) -> float | None:
    """Mean over prompts of tokens/s (Spec-Bench's per-method speed), or None without rows."""
    sel = _select(rows, method, category)
    return sum(r["tokens_per_s"] for r in sel) / len(sel) if sel else None


def prompt_key(row: Row) -> tuple[int, int]:
    """What identifies one measured prompt: the question and its turn (`--turns 2` asks each question twice)."""
    return row["question_id"], row.get("turn", 1)


def spec_bench_speedup(rows: Sequence[Row], method: str, reference: str, category: str | None = None) -> float | None:
    """mean tok/s(method) / mean tok/s(reference) over the prompts both ran (ratio of means), or None."""
    ref = {prompt_key(r): r["tokens_per_s"] for r in _select(rows, reference, category)}
    own = {prompt_key(r): r["tokens_per_s"] for r in _select(rows, method, category)}
    common = [q for q in own if q in ref]
    if not common:
        return None
    ref_mean = sum(ref[q] for q in common) / len(common)
    return sum(own[q] for q in common) / len(common) / ref_mean if ref_mean > 0 else None


def pooled_tau(rows: Sequence[Row], method: str, category: str | None = None) -> float | None:
    """Sum of new tokens / sum of target forwards, or None when any prompt's forward count is unknown."""
    sel = _select(rows, method, category)
    if not sel or any(r.get("target_forwards") is None for r in sel):
        return None
    forwards = sum(r["target_forwards"] for r in sel)
    return sum(r["new_tokens"] for r in sel) / forwards if forwards else None


def draft_vocab_reach(rows: Sequence[Row], method: str, category: str | None = None) -> float | None:
    """Share of the method's output tokens inside its head's draft vocabulary (pooled), or None when the head drafts
    over the full vocabulary. A token outside it can only come from the lookup chain or the target's own bonus token,
    so this share bounds how much of the output the head alone could have guessed."""
    sel = _select(rows, method, category)
    if not sel or any("in_draft_vocab" not in r for r in sel):
        return None
    total = sum(r["new_tokens"] for r in sel)
    return sum(r["in_draft_vocab"] for r in sel) / total if total else None


def mismatches(rows: Sequence[Row], method: str) -> int | None:
    """Prompts whose tokens differ from baseline's; None when no prompt was compared (T > 0 or no baseline)."""
    flags = [r["identical_to_baseline"] for r in _select(rows, method) if r.get("identical_to_baseline") is not None]
    return sum(not f for f in flags) if flags else None


def unexplained_mismatches(rows: Sequence[Row], method: str) -> int | None:
    """Mismatches that no numerical near tie explains (row["divergence"]["near_tie"] false or missing): each would
    be a bug. None when no prompt was compared, and for rows of other weights (a GGUF's `weights`): another model
    may differ without a bug."""
    sel = [r for r in _select(rows, method) if r.get("identical_to_baseline") is not None and "weights" not in r]
    if not sel:
        return None
    return sum(r["identical_to_baseline"] is False and not (r.get("divergence") or {}).get("near_tie") for r in sel)


def acceptance(rows: Sequence[Row], method: str) -> dict:
    """Pooled draft acceptance rate, per-depth acceptance and acceptance histogram of an EAGLE method."""
    sel = [r for r in _select(rows, method) if "accept_hist" in r]
    hist: list[int] = []
    for r in sel:
        hist.extend([0] * (len(r["accept_hist"]) - len(hist)))
        for j, n in enumerate(r["accept_hist"]):
            hist[j] += n
    steps = sum(hist)
    drafted = sum(r["drafted_tokens"] for r in sel)
    reached = [sum(hist[d:]) for d in range(len(hist))]  # reached[d] = steps whose path reached depth d
    return {
        "accept_rate": sum(r["accepted_drafts"] for r in sel) / drafted if drafted else None,
        "depth_accept": [reached[d] / steps for d in range(1, len(hist))] if steps else [],
        "n_alpha": [reached[n + 1] / reached[n] for n in range(len(hist) - 1) if reached[n]],
        "accept_hist": hist,
    }


def step_split(rows: Sequence[Row], method: str) -> dict | None:
    """Mean ms per target forward, pooled over prompts: {"target", "draft", "other", "total"}.

    Our decoders (rows with "step_ms"): decode steps after the prefill, split into the target's forward (LM head
    included), the draft head's passes, and everything else; weights are each prompt's decode steps. `generate()`
    (hf, hf-pld): wall seconds / target forwards, prefill included, as "total" only (its inside is not timed).
    """
    sel = _select(rows, method)
    if sel and all("step_ms" in r for r in sel):
        n = sum(r["step_ms"]["steps"] for r in sel)
        if not n:
            return None
        out = {k: sum(r["step_ms"][k] * r["step_ms"]["steps"] for r in sel) / n for k in ("target", "draft", "other")}
        return {**out, "total": sum(out.values())}
    forwards = sum(r.get("target_forwards") or 0 for r in sel)
    if not sel or any(r.get("target_forwards") is None for r in sel) or not forwards:
        return None
    return {"target": None, "draft": None, "other": None, "total": 1e3 * sum(r["seconds"] for r in sel) / forwards}


def matched_speedup(rows: Sequence[Row], method: str, reference: str) -> tuple[float | None, int]:
    """(speedup, n): spec_bench_speedup over only the prompts where both the method's and the reference's outputs
    equal baseline's (identical_to_baseline True on both rows); (None, 0) when nothing was compared."""
    same = {prompt_key(r) for r in _select(rows, method) if r.get("identical_to_baseline") is True}
    same &= {prompt_key(r) for r in _select(rows, reference) if r.get("identical_to_baseline") is True}
    if not same:
        return None, 0
    kept = [r for r in rows if prompt_key(r) in same]
    return spec_bench_speedup(kept, method, reference), len(same)


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of a non-empty list (numpy's default), pure."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def spread(xs: Sequence[float]) -> dict | None:
    """{"median", "p10", "p90", "min", "max"} of per-prompt values, or None without values."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": quantile(xs, 0.5), "p10": quantile(xs, 0.1), "p90": quantile(xs, 0.9), "min": min(xs),
            "max": max(xs)}


def per_prompt_speedups(rows: Sequence[Row], method: str, reference: str) -> list[float]:
    """tok/s(method) / tok/s(reference) per prompt both ran (the spread beside the ratio of means)."""
    ref = {prompt_key(r): r["tokens_per_s"] for r in _select(rows, reference)}
    return [r["tokens_per_s"] / ref[prompt_key(r)] for r in _select(rows, method) if ref.get(prompt_key(r))]


def copied_share(rows: Sequence[Row], method: str) -> float | None:
    """Pooled share of accepted drafts copied from the context (lookup) rather than drafted by the head; None when
    the rows do not count it or nothing was accepted."""
    sel = [r for r in _select(rows, method) if "accepted_lookup" in r]
    accepted = sum(r["accepted_drafts"] for r in sel)
    return sum(r["accepted_lookup"] for r in sel) / accepted if sel and accepted else None


def loops(rows: Sequence[Row], method: str) -> int | None:
    """Outputs of the method that end in a loop (rows' loop_period set); None when rows do not record it."""
    sel = [r for r in _select(rows, method) if "loop_period" in r]
    return sum(r["loop_period"] is not None for r in sel) if sel else None


def honest_figures(rows: Sequence[Row], method: str, methods: Sequence[str]) -> dict:
    """The figures a mean hides, for one method (see the module docstring)."""
    ref = "baseline" if "baseline" in methods else ("hf" if "hf" in methods else None)
    out: dict = {"spread_reference": ref}
    for r in ("hf", "baseline"):
        if r in methods:
            out[f"speedup_vs_{r}_matched"], out[f"n_matched_vs_{r}"] = matched_speedup(rows, method, r)
    out["speedup_spread"] = spread(per_prompt_speedups(rows, method, ref)) if ref else None
    out["tau_spread"] = spread([r.get("tau") for r in _select(rows, method)])
    out["tokens_per_s_median"] = (spread([r["tokens_per_s"] for r in _select(rows, method)]) or {}).get("median")
    out["copied_share"] = copied_share(rows, method)
    out["loops"] = loops(rows, method)
    return out


def _figures(rows: Sequence[Row], method: str, category: str | None, methods: Sequence[str]) -> dict:
    def vs(ref: str) -> float | None:
        return spec_bench_speedup(rows, method, ref, category) if ref in methods else None

    return {
        "n_prompts": len(_select(rows, method, category)),
        "tokens_per_s": mean_tokens_per_s(rows, method, category),
        "speedup_vs_hf": vs("hf"),
        "speedup_vs_baseline": vs("baseline"),
        "tau": pooled_tau(rows, method, category),
        "in_draft_vocab": draft_vocab_reach(rows, method, category),
    }


def summarize_rows(rows: Sequence[Row]) -> dict:
    """{method: {tokens_per_s, speedup_vs_hf, speedup_vs_baseline, tau, mismatches, unexplained_mismatches,
    per_category, [acceptance]}}."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cats = list(dict.fromkeys(r["category"] for r in rows))
    out = {}
    for m in methods:
        s = _figures(rows, m, None, methods)
        s["mismatches"] = mismatches(rows, m)
        s["unexplained_mismatches"] = unexplained_mismatches(rows, m)
        if any("accept_hist" in r for r in _select(rows, m)):
            s.update(acceptance(rows, m))
        s["step_ms"] = step_split(rows, m)
        s.update(honest_figures(rows, m, methods))
        s["per_category"] = {c: _figures(rows, m, c, methods) for c in cats}
        out[m] = s
    return out


# ------------------------------------------------------------------------------------------------- rendering


def _num(x: float | None, fmt: str, suffix: str = "") -> str:
    return "–" if x is None else format(x, fmt) + suffix


def reference_of(summary: dict) -> str:
    """The speedup reference used in per-category views: hf when it ran, else baseline."""
    return "hf" if "hf" in summary else "baseline"


def _mismatch_cell(s: dict) -> str:
    """'16 (0 unexplained)': mismatches, and how many no near tie explains (core/engine/exactness.py)."""
    n, bad = s.get("mismatches"), s.get("unexplained_mismatches")
    if n is None or bad is None or n == 0:
        return _num(n, "d")
    return f"{n} ({bad} unexplained)"


def summary_table(summary: dict) -> str:
    """Markdown: method | tok/s | speedup vs hf | speedup vs baseline | tau | mismatches."""
    lines = ["| method | tok/s | speedup vs hf | speedup vs baseline | τ | mismatches |", "|---|---|---|---|---|---|"]
    for m, s in summary.items():
        lines.append(f"| {m} | {_num(s['tokens_per_s'], '.1f')} | {_num(s['speedup_vs_hf'], '.2f', 'x')} | "
                     f"{_num(s['speedup_vs_baseline'], '.2f', 'x')} | {_num(s['tau'], '.2f')} | "
                     f"{_mismatch_cell(s)} |")
    return "\n".join(lines)


def honest_table(summary: dict) -> str:
    """Markdown: per method, speedup over all prompts and over matched prompts only, the per-prompt speedup's median
    [p10, p90], tau's median [min, max], the copied share of accepted drafts and the looping outputs."""
    ref = next((s["spread_reference"] for s in summary.values() if s.get("spread_reference")), None) or "baseline"
    lines = [f"| method | speedup vs {ref}: all | matched only (n) | per prompt: median [p10, p90] | "
             "τ per prompt: median [min, max] | copied share | outputs ending in a loop |", "|---|---|---|---|---|---|---|"]
    for m, s in summary.items():
        sp, tau = s.get("speedup_spread"), s.get("tau_spread")
        matched = s.get(f"speedup_vs_{ref}_matched")
        n = s.get(f"n_matched_vs_{ref}")
        cells = [
            _num(s.get(f"speedup_vs_{ref}"), ".2f", "x"),
            "–" if matched is None else f"{matched:.2f}x ({n})",
            "–" if not sp else f"{sp['median']:.2f}x [{sp['p10']:.2f}, {sp['p90']:.2f}]",
            "–" if not tau else f"{tau['median']:.2f} [{tau['min']:.2f}, {tau['max']:.2f}]",
            _num(s.get("copied_share"), ".0%"),
            "–" if s.get("loops") is None else f"{s['loops']} of {s['n_prompts']}",
        ]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def category_table(summary: dict) -> str:
    """Markdown: one row per category, one column per method, cells 'speedup vs reference · tau'."""
    ref = reference_of(summary)
    key = f"speedup_vs_{ref}"
    methods = list(summary)
    cats = list(next(iter(summary.values()))["per_category"]) if summary else []
    lines = [f"| category (speedup vs {ref} · τ) | n | " + " | ".join(methods) + " |",
             "|---|---|" + "---|" * len(methods)]
    for c in cats + ["overall"]:
        figs = [summary[m] if c == "overall" else summary[m]["per_category"][c] for m in methods]
        cells = [f"{_num(f[key], '.2f', 'x')} · {_num(f['tau'], '.2f')}" for f in figs]
        lines.append(f"| {c} | {figs[0]['n_prompts']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def vocab_table(summary: dict) -> str:
    """Markdown: per category, the share of each method's output inside its head's draft vocabulary (methods whose
    head has a reduced vocabulary only; empty string when none has)."""
    methods = [m for m, s in summary.items() if s.get("in_draft_vocab") is not None]
    if not methods:
        return ""
    cats = list(summary[methods[0]]["per_category"])
    lines = ["| category (output tokens in the draft vocabulary) | " + " | ".join(methods) + " |",
             "|---|" + "---|" * len(methods)]
    for c in cats + ["overall"]:
        figs = [summary[m] if c == "overall" else summary[m]["per_category"][c] for m in methods]
        lines.append(f"| {c} | " + " | ".join(_num(f["in_draft_vocab"], ".3f") for f in figs) + " |")
    return "\n".join(lines)


def acceptance_table(summary: dict, depths: int = 6) -> str:
    """Markdown: per EAGLE method, pooled accept rate, depth acceptance and n-alpha for the first `depths` depths."""
    lines = ["| method | accept rate | depth acceptance 1.. (unconditional) | n-α 0.. (conditional) |",
             "|---|---|---|---|"]
    for m, s in summary.items():
        if "accept_hist" in s:
            lines.append(f"| {m} | {_num(s['accept_rate'], '.3f')} | "
                         + ", ".join(f"{x:.2f}" for x in s["depth_accept"][:depths]) + " | "
                         + ", ".join(f"{x:.2f}" for x in s["n_alpha"][:depths]) + " |")
    return "\n".join(lines)


def step_table(summary: dict) -> str:
    """Markdown: where a step's time goes, mean ms per target forward (see step_split)."""
    lines = ["| method | ms per step | target forward | draft head | other (tree, lookup, accept, KV, record) |",
             "|---|---|---|---|---|"]
    for m, s in summary.items():
        t = s.get("step_ms")
        if not t:
            continue
        share = (lambda k: f"{t[k]:.1f} ({100 * t[k] / t['total']:.0f} %)") if t["target"] is not None else None
        cells = [share(k) if share else "–" for k in ("target", "draft", "other")]
        lines.append(f"| {m} | {t['total']:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_figure(rows: Sequence[Row], summary: dict, title: str = ""):
    """Plotly figure: speedup per category (bars, one per method) and a per-prompt tau histogram (EAGLE methods)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ref = reference_of(summary)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"Speedup vs {ref} per category (ratio of mean tok/s)",
                                                         "τ per prompt (EAGLE methods)"))
    for m, s in summary.items():
        if m == ref:
            continue
        cats = list(s["per_category"]) + ["overall"]
        ys = [s["per_category"][c][f"speedup_vs_{ref}"] for c in cats[:-1]] + [s[f"speedup_vs_{ref}"]]
        fig.add_trace(go.Bar(x=cats, y=ys, name=m, legendgroup=m), row=1, col=1)
    for m in summary:
        taus = [r["tau"] for r in _select(rows, m) if "accept_hist" in r and r["tau"] is not None]
        if taus:
            fig.add_trace(go.Histogram(x=taus, name=f"{m} τ", opacity=0.7, legendgroup=m), row=1, col=2)
    fig.add_hline(y=1.0, line_dash="dot", line_color="gray", row=1, col=1)
    fig.update_yaxes(title_text="speedup", row=1, col=1)
    fig.update_xaxes(title_text="τ (new tokens / target forwards)", row=1, col=2)
    fig.update_yaxes(title_text="prompts", row=1, col=2)
    fig.update_layout(title=title, barmode="group", height=480, template="plotly_white")
    return fig


def write_html(path: str, rows: Sequence[Row], summary: dict, title: str = "") -> None:
    """A standalone HTML report (plotly.js inlined, so it opens offline)."""
    build_figure(rows, summary, title).write_html(path, include_plotlyjs=True, full_html=True)
