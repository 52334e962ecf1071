"""A finished run as plain JSON, in one shape: `run_result()` is what the history keeps, what a run's download
writes and what `/run` answers (`api_result()` spells the same facts out under /run's documented keys).

Per lane (app/lanes.py: keyed by method) the text, the token ids, the statistics with vLLM's names beside ours and
the speedup over the baseline; for the run the identity check, whether both lanes ran bit-exact in their dtype
(`bit_exact`: every forward inside the rows the start-up probe found row-invariant, docs/trust.md §6), where greedy outputs part ways, the speedup and the
"why this speedup" arithmetic of every drafting lane (app/why.py). Pure: no gradio, no tensors.
"""
from __future__ import annotations

from typing import Mapping

from app.lanes import BASELINE, EAGLE, speedup
from app.why import Why, explain
from core.engine.events import RunStats, summarize
from core.engine.exactness import divergence_of, short_name
from core.engine.metrics_names import with_serving_names

TREE_KEYS = ("total_tokens", "depth", "top_k", "lookup", "stop_below")


def lane_stats(record) -> dict[str, RunStats]:
    """Each lane's statistics so far, by slot."""
    return {slot: summarize(record.steps(slot)) for slot in record.lanes}


def whys_of(record, stats: Mapping[str, RunStats], profile: dict[int, float] | None) -> list[Why]:
    """The arithmetic of every drafting lane of a run (EAGLE-2 first, then the token-level lane)."""
    rows = sorted((r for r in record.rows if r.drafts), key=lambda r: r is not EAGLE)
    out = []
    for row in rows:
        w = explain(row.title, stats[BASELINE.slot], stats[row.slot], record.steps(row.slot), profile)
        if w is not None:
            out.append(w)
    return out


def divergence(record, dtype) -> dict | None:
    """Where greedy outputs part ways and whether a near tie explains it (core/engine/exactness.py), else None."""
    if not record.greedy:
        return None
    div = divergence_of(record.steps(BASELINE.slot), record.steps(EAGLE.slot), dtype)
    return div.as_dict() | {"dtype": short_name(dtype)} if div else None


def run_result(record, texts: Mapping[str, str], dtype, profile: dict[int, float] | None = None) -> dict:
    """The one JSON record of a run (a live RunRecord with its events): `texts` by slot (the caller's decode of
    each lane), `dtype` the target's (a divergence's near-tie tolerance), `profile` verify ms by tree size for the
    "why" what-if. Each speedup is computed here and nowhere else."""
    stats = lane_stats(record)
    base = stats[BASELINE.slot]
    lanes = {row.method: {"text": texts[row.slot], "token_ids": record.ids(row.slot),
                          "stats": with_serving_names(stats[row.slot].as_dict()),
                          "speedup": speedup(stats[row.slot], base) if row.drafts else 1.0}
             for row in record.rows}
    result = {"model": record.model, "head": record.choice.head_name, "prompt": record.prompt,
              "settings": dict(record.settings),
              "greedy": record.greedy, "identical": record.ids(BASELINE.slot) == record.ids(EAGLE.slot),
              "bit_exact": bool(base.bit_exact and stats[EAGLE.slot].bit_exact),
              "divergence": divergence(record, dtype), "note": record.note,
              "stopped": not all(record.finished(slot) for slot in record.lanes),
              "speedup": lanes[EAGLE.method]["speedup"], "tau": stats[EAGLE.slot].tau, "lanes": lanes,
              "why": [w.as_dict() for w in whys_of(record, stats, profile)]}
    if "compare" in stats:
        result["eagle_vs_compare"] = speedup(stats[EAGLE.slot], stats["compare"])
    return result


def api_result(result: dict, compare: str) -> dict:
    """`/run`'s answer: the run's record under the keys docs/usage.md documents (`<lane>_text`, `<lane>_token_ids`,
    statistics by lane, `compare_*` for a token-level lane), plus the tree that ran and the "why" numbers."""
    lanes = result["lanes"]
    b, e = lanes[BASELINE.method], lanes[EAGLE.method]
    out = {"lanes": list(lanes), "model": result["model"], "head": result["head"], "baseline_text": b["text"],
           "eagle_text": e["text"],
           "identical": result["identical"], "bit_exact": result.get("bit_exact", False),
           "divergence": result["divergence"], "greedy": result["greedy"],
           "baseline_token_ids": b["token_ids"], "eagle_token_ids": e["token_ids"],
           "baseline": b["stats"], "eagle": e["stats"], "speedup": result["speedup"],
           "tree": {k: result["settings"][k] for k in TREE_KEYS}, "note": result["note"], "why": result["why"]}
    if compare in lanes:
        c = lanes[compare]
        out |= {"compare_method": compare, "compare_text": c["text"], "compare_token_ids": c["token_ids"],
                "compare_identical": b["token_ids"] == c["token_ids"], "compare": c["stats"],
                "compare_speedup": c["speedup"], "eagle_vs_compare": result["eagle_vs_compare"]}
    return out
