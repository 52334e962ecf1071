"""Links that reproduce a run (app/links.py) and the session's run history (app/history.py), on real finished runs
of the replaying fake decoders."""
from __future__ import annotations

import csv
import io
import json

from app import history as hist
from app.inputs import Limits
from app.links import LINK_FIELDS, copy_js, from_query
from fakes import CharTokenizer, ReplayDecoder, baseline_events, eagle_events


def test_query_values_are_parsed_and_bad_ones_named():
    lim = Limits()
    values, notes = from_query({"prompt": "Once upon", "max_new_tokens": "64", "temperature": "0.7", "seed": "3",
                                "total_tokens": "24", "depth": "99", "top_p": "x", "compare": "lookup",
                                "model": "nope", "unknown": "1"}, lim, ("none", "lookup"), ("gemma-3-270m",))
    assert values == {"prompt": "Once upon", "max_new_tokens": 64, "temperature": 0.7, "seed": 3,
                      "total_tokens": 24, "compare": "lookup"}
    assert any("depth 99 is outside" in n for n in notes)
    assert any("top_p 'x' is not a number" in n for n in notes)
    assert any("model 'nope' is not offered" in n for n in notes)
    values, notes = from_query({"max_new_tokens": "1.5", "prompt": "x" * (lim.prompt_chars + 1)}, lim)
    assert values == {} and len(notes) == 2


def test_copy_js_names_the_keys_in_wiring_order():
    js = copy_js(LINK_FIELDS[:3])
    assert '["prompt", "max_new_tokens", "temperature"]' in js and "clipboard" in js


def finished_record(prompt: str, text: str, plan):
    """A real finished run through the Playground's stream: its compact record, as the state holds it."""
    from app.handlers import Playground

    pg = Playground(CharTokenizer(), ReplayDecoder("baseline", baseline_events(text)),
                    ReplayDecoder("eagle2", eagle_events(text, plan)), text_every=0, plot_every=0, charts_every=0,
                    verify_ms={1: 5.0, 2: 6.0, 4: 8.0})
    *_, last = pg.stream(prompt, 64, 0.0, 1.0, 0, 4, 3, 2, 0)
    return last[-1]


def test_history_keeps_each_run_once_with_its_record_and_writes_csv_and_json():
    a = finished_record("Once", " upon a time", [2, 1])
    b = finished_record("def f():", " return 1", [1])
    history = hist.add(hist.add(hist.add([], a), b), a)  # the same run reported twice is kept once
    assert [r.finished_run["summary"]["prompt"] for r in history] == ["Once", "def f():"]
    rows = hist.rows(history)
    assert rows[0][:3] == [1, "Once", rows[0][2]] and rows[0][3] == "4 nodes · depth 3 · top-2"
    assert rows[0][4] == round(a.finished_run["summary"]["speedup"], 2) and rows[0][5] > 1
    s = json.loads(open(hist.record_file(a)).read())
    assert s["prompt"] == "Once" and s["lanes"]["eagle2"]["text"] == " upon a time"
    assert s["settings"] == {"prompt": "Once", "max_new_tokens": 64, "temperature": 0.0, "top_p": 1.0, "seed": 0,
                             "total_tokens": 4, "depth": 3, "top_k": 2, "lookup": 0, "stop_below": 0.0,
                             "compare": "none"}
    assert s["lanes"]["eagle2"]["trees"][0]["accepted_path"] and s["why"][0]["lane"] == "EAGLE-2"
    views = hist.views_of(a.finished_run)
    assert "why-panel" in views["why"] and "gen-text" in views["eagle-output"]
    table = list(csv.reader(io.StringIO(open(hist.history_file(history)).read())))
    assert table[0][:4] == ["run", "time", "prompt", "model"] and [r[2] for r in table[1:]] == ["Once", "def f():"]
    assert hist.history_file([]) is None and hist.add([], None) == []
    assert len(hist.add([finished_record(str(i), " x", [1]) for i in range(hist.HISTORY_MAX)], b)) == hist.HISTORY_MAX


def test_reopened_view_redraws_trees_and_charts():
    from app.panels import reopen_view

    rec = finished_record("Once", " upon a time", [2, 1])
    view = reopen_view(rec, lambda t: chr(t))
    assert view["eagle-output"] == hist.views_of(rec.finished_run)["eagle-output"]
    assert view["draft-tree"].data and view["stats-charts"].data and "why-panel" in view["why"]
