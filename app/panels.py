"""The panels around a run: "why this speedup", the session's run history with its downloads, and the link that
reproduces a run. Laid out by `build_panels()` and wired by `wire_panels()`, which ui.py calls inside its Blocks;
the logic lives in app/why.py, app/history.py and app/links.py (no gradio there), the event functions stay thin.
"""
from __future__ import annotations

import dataclasses

import gradio as gr

import app.history as hist
from app.handlers import step_slider
from app.lanes import BASELINE, EAGLE, lane_title
from app.links import LINK_FIELDS, copy_js, from_query
from app.plots import stats_figure, tree_figure
from app.state import STATE_TTL_S
from app.why import why_html
from core.engine.events import RunStats


def stats_from_dict(d: dict) -> RunStats:
    """RunStats back from its as_dict() form (a history entry keeps plain JSON)."""
    names = {f.name for f in dataclasses.fields(RunStats)}
    kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in names}
    return RunStats(**kw)


def reopen_view(record, label) -> dict:
    """The views of a past run (a compact RunRecord with finished_run), keyed by component id, plus its trees and
    charts redrawn from the record; the step slider scrubs its trees again."""
    views, s = hist.views_of(record.finished_run), record.finished_run["summary"]
    stats = {m: stats_from_dict(v["stats"]) for m, v in s["lanes"].items()}
    kind = record.compare_kind
    compare_label = lane_title(kind)
    out = {k: views[k] for k in ("baseline-output", "eagle-output", "stats") if k in views}
    if "compare-output" in views:
        out["compare-output"] = views["compare-output"]
    out["stats-charts"] = stats_figure(stats[BASELINE.method], stats[EAGLE.method], stats.get(kind), compare_label)
    n = record.lane_tree_count("eagle")
    out["draft-tree"] = tree_figure(record.tree_step(n - 1) if n else None, label,
                                    title=f"Step {n} of {n}" if n else "")
    if kind != "none":
        m = record.lane_tree_count("compare")
        out["compare-tree"] = tree_figure(record.tree_step(m - 1, "compare") if m else None, label)
    out["step-slider"] = step_slider(max(n, record.lane_tree_count("compare") if kind != "none" else 0))
    out["why"] = views.get("why", why_html([]))
    return out


def build_panels() -> dict:
    """Lay out the "why", history and link panels where ui.py calls this (under the race); `wire_panels` connects
    them once the run's events exist. Returns the new components by id."""
    with gr.Accordion("Why this speedup", open=True, elem_id="why-accordion"):
        why = gr.HTML(why_html([]), elem_id="why")
    with gr.Accordion("Runs of this session", open=False, elem_id="history-accordion"):
        table = gr.Dataframe(headers=list(hist.COLUMNS), value=[], interactive=False, elem_id="history-table",
                             wrap=True)
        with gr.Row():
            pick = gr.Dropdown(choices=[], value=None, label="Reopen a run", elem_id="history-pick", scale=3)
            run_json = gr.DownloadButton("Download this run (JSON)", value=None, elem_id="download-run", scale=1,
                                         interactive=False)
            all_csv = gr.DownloadButton("Download history (CSV)", value=None, elem_id="download-history", scale=1,
                                        interactive=False)
    with gr.Row(elem_id="link-row"):
        copy = gr.Button("Copy link to this prompt and settings", elem_id="copy-link", scale=1, size="sm")
        link = gr.Textbox(label="Link", show_label=False, interactive=False, elem_id="link", scale=4,
                          placeholder="a link that reproduces the prompt, model and settings", buttons=["copy"])
    return {"why": why, "history-table": table, "history-pick": pick, "download-run": run_json,
            "download-history": all_csv, "copy-link": copy, "link": link}


def wire_panels(pg, panels: dict, by_id: dict, link_targets: dict, done: list, label_for=None) -> None:
    """Wire the panels: `by_id`: the run's output components by id; `link_targets`: the components a link sets, by
    LINK_FIELDS key ("prompt" and "compare" among them); `done`: the events after which a run has ended (Run,
    Stop); `label_for`: record -> token labeller for a reopened run's trees (in its model's tokenizer), else
    pg.label."""
    prompt, race_with = link_targets["prompt"], link_targets["compare"]
    why, table, pick, run_json, all_csv, copy, link = (panels[k] for k in (
        "why", "history-table", "history-pick", "download-run", "download-history", "copy-link", "link"))
    runs = gr.State([], time_to_live=STATE_TTL_S)
    state = by_id["state"]

    def finished(record, history):
        history = hist.add(history, record)
        opts = hist.choices(history)
        latest = opts[-1][1] if opts else None
        done_run = record.finished_run if record is not None else None
        return (history, hist.rows(history), gr.Dropdown(choices=opts, value=latest),
                hist.views_of(done_run)["why"] if done_run else gr.skip(),
                gr.DownloadButton(value=hist.record_file(record), interactive=bool(done_run)),
                gr.DownloadButton(value=hist.history_file(history), interactive=bool(history)))

    outs = [runs, table, pick, why, run_json, all_csv]
    for event in done:
        event.then(finished, [state, runs], outs, queue=False, show_progress="hidden", api_visibility="private")

    view_ids = ("baseline-output", "compare-output", "eagle-output", "stats", "stats-charts", "draft-tree",
                "compare-tree", "step-slider", "state")
    reopen_outs = [by_id[k] for k in view_ids] + [why, prompt, race_with, run_json]

    def reopen(index, history):
        history = history or []
        if index is None or not 0 <= int(index) < len(history):
            return [gr.skip()] * len(reopen_outs)
        record = history[int(index)]
        label = label_for(record) if label_for is not None else pg.label
        view = reopen_view(record, label)
        view["state"] = record
        s = record.finished_run["summary"]
        return ([view.get(k, gr.skip()) for k in view_ids]
                + [view["why"], s["prompt"], record.compare_kind,
                   gr.DownloadButton(value=hist.record_file(record), interactive=True)])

    pick.input(reopen, [pick, runs], reopen_outs, queue=False, api_visibility="private")

    keys = tuple(k for k in LINK_FIELDS if k in link_targets)
    copy.click(None, [link_targets[k] for k in keys], [link], js=copy_js(keys), api_visibility="private")


def restore_from_link(pg, targets: dict, models: tuple[str, ...] = (), touched=None):
    """A demo.load function: the URL query's values into their components (`targets`: LINK_FIELDS key ->
    component, in that order); values left out or refused stay as they are, and a note says what was ignored.
    `touched`: the gr.State that keeps a tree the user set (a link's tree counts as set). Returns (fn, outputs)."""
    keys = [k for k in LINK_FIELDS if k in targets]
    tree_keys = {"total_tokens", "depth", "top_k", "lookup", "stop_below"}

    def load(request: gr.Request):
        query = dict(getattr(request, "query_params", None) or {})
        values, notes = from_query(query, pg.limits, ("none", *pg.compare), models)
        if notes:
            gr.Warning("Link settings ignored: " + "; ".join(notes))
        out = [values[k] if k in values else gr.skip() for k in keys]
        return out + ([True if tree_keys & set(values) else gr.skip()] if touched is not None else [])

    return load, [targets[k] for k in keys] + ([touched] if touched is not None else [])
