"""Run history: this browser session's finished runs, each kept with its full record and its views.

When a run ends (done or stopped) the handler attaches `finished_run()` to its record: `summary`, the run's record
as plain JSON (app/result.py `run_result`, the shape `/run` answers from: prompt, model and head, settings, per lane
the text, token ids and statistics, and the "why this speedup" arithmetic), and `views`, the HTML the panels showed;
the verified draft trees stay packed in the compact record (app/state.py) and are spelled out only in the downloaded
file. The UI appends it to a gr.State list (per session, at most HISTORY_MAX runs), lists the runs in a table,
reopens any one (its views, its compact record for the step slider), and writes the downloads: one run's record
as JSON, the history as CSV.
No tensors, no models: records and strings only.
"""
from __future__ import annotations

import csv
import io
import json
import tempfile
import time
import uuid
import zlib
from pathlib import Path

from app.result import run_result
from app.state import SOURCES, RunRecord
from app.why import why_html, why_of

HISTORY_MAX = 20  # runs kept per session; the oldest goes first
COLUMNS = ("#", "prompt", "model", "tree", "speedup", "τ")
VIEW_KEYS = ("baseline-output", "compare-output", "eagle-output", "stats")
DOWNLOADS = Path(tempfile.gettempdir()) / "eagle-playground-downloads"


def run_settings(prompt: str, cfg, compare: str) -> dict:
    """A request's resolved settings (the tree the run used, filled in from the plan), as links and records keep
    them: the keys are RunSettings' field names."""
    t, s = cfg.tree, cfg.sampling
    return {"prompt": prompt, "max_new_tokens": cfg.max_new_tokens, "temperature": s.temperature, "top_p": s.top_p,
            "seed": s.seed, "total_tokens": t.total_tokens, "depth": t.depth, "top_k": t.top_k, "lookup": t.lookup,
            "stop_below": t.stop_below, "compare": compare}


def model_text(summary: dict) -> str:
    """'gemma-3-270m', or 'gemma-3-270m + my-head' for a run with a head the visitor bound."""
    head = summary.get("head")
    return f"{summary['model']} + {head}" if head else summary["model"]


def tree_text(settings: dict) -> str:
    """'16 nodes · depth 6 · top-6 · lookup 10' for the table."""
    if not settings:
        return ""
    text = f"{settings['total_tokens']} nodes · depth {settings['depth']} · top-{settings['top_k']}"
    text += f" · lookup {settings['lookup']}" if settings.get("lookup") else ""
    return text + (f" · stop {settings['stop_below']:g}" if settings.get("stop_below") else "")


def _trees(packed) -> list[dict]:
    """A lane's verified draft trees from a compact record's PackedTrees (app/state.py), as JSON."""
    return [{"step": t.step, "parents": list(t.parents), "tokens": list(t.tokens),
             "scores": [round(x, 5) for x in t.scores], "sources": [SOURCES[i] for i in t.sources],
             "accepted_path": list(t.accepted_path), "new_token_ids": list(t.new_token_ids)} for t in packed]


def finished_run(record, texts: dict[str, str], view: dict, dtype, profile: dict[int, float] | None = None) -> dict:
    """The full record and the views of a run that has just ended (record: the live RunRecord with its events;
    texts: each lane's text by slot; view: the final views by component id; dtype and profile: see run_result)."""
    summary = {"id": uuid.uuid4().hex[:12], "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    summary |= run_result(record, texts, dtype, profile)
    views = {k: view[k] for k in VIEW_KEYS if k in view and isinstance(view[k], str)}
    views["why"] = why_html([why_of(w) for w in summary["why"]])
    # compressed: the session state keeps every run's views, and token-coloured HTML packs about 8x
    return {"summary": summary, "views": {k: zlib.compress(v.encode("utf-8")) for k, v in views.items()}}


def views_of(done: dict) -> dict[str, str]:
    """A finished run's views (HTML by component id), unpacked."""
    return {k: zlib.decompress(v).decode("utf-8") for k, v in done["views"].items()}


def add(history: list | None, record: RunRecord | None) -> list:
    """The history with `record` (a compact RunRecord carrying finished_run) appended; unchanged when the record
    has none or is already listed (Stop and the run's end can both report one run)."""
    history = list(history or [])
    done = record.finished_run if record is not None else None
    if not done or any(r.finished_run["summary"]["id"] == done["summary"]["id"] for r in history):
        return history
    return (history + [record])[-HISTORY_MAX:]


def rows(history: list | None) -> list[list]:
    """The history table: one row per run, newest last."""
    out = []
    for i, r in enumerate(history or [], 1):
        s = r.finished_run["summary"]
        prompt = s["prompt"] if len(s["prompt"]) <= 60 else s["prompt"][:57] + "…"
        out.append([i, prompt, model_text(s), tree_text(s["settings"]), round(s["speedup"], 2), round(s["tau"], 2)])
    return out


def choices(history: list | None) -> list[tuple[str, int]]:
    """The reopen menu: '#3 · Once upon a time… · 1.85×' -> index."""
    return [(f"#{row[0]} · {row[1]} · {row[4]:.2f}×", row[0] - 1) for row in rows(history)]


def csv_text(history: list | None) -> str:
    """The history as CSV: the table's columns plus the numbers behind them."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["run", "time", "prompt", "model", "tree", "max_new_tokens", "temperature", "top_p", "seed",
                "compare", "speedup", "tau", "baseline_tokens_per_s", "eagle_tokens_per_s", "new_tokens",
                "identical", "predicted_speedup"])
    for i, r in enumerate(history or [], 1):
        s = r.finished_run["summary"]
        st, lanes = s["settings"], s["lanes"]
        why = s["why"][0]["predicted_speedup"] if s["why"] else ""
        w.writerow([i, s["time"], s["prompt"], model_text(s), tree_text(st), st.get("max_new_tokens"),
                    st.get("temperature"), st.get("top_p"), st.get("seed"), st.get("compare"),
                    f"{s['speedup']:.4f}", f"{s['tau']:.4f}", f"{lanes['baseline']['stats']['tokens_per_s']:.3f}",
                    f"{lanes['eagle2']['stats']['tokens_per_s']:.3f}", lanes["eagle2"]["stats"]["new_tokens"],
                    s["identical"], f"{why:.4f}" if why != "" else ""])
    return buf.getvalue()


def _write(name: str, text: str) -> str:
    folder = DOWNLOADS / uuid.uuid4().hex[:16]  # one folder per file: names stay readable, never collide
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def record_file(record: RunRecord | None) -> str | None:
    """One run's full record as a JSON file (its path), or None."""
    done = record.finished_run if record is not None else None
    if not done:
        return None
    s = dict(done["summary"])  # the state keeps the trees packed once; the file spells them out
    s["lanes"] = {m: dict(v) for m, v in s["lanes"].items()}
    for row in record.rows:
        if row.drafts:
            s["lanes"][row.method]["trees"] = _trees(record.packed.get(row.slot, []))
    return _write(f"eagle-run-{s['id']}.json", json.dumps(s, indent=1, ensure_ascii=False) + "\n")


def history_file(history: list | None) -> str | None:
    """The session's history as a CSV file (its path), or None when empty."""
    return _write("eagle-history.csv", csv_text(history)) if history else None

