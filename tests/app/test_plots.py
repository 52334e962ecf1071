"""Figures: the draft tree of a hand-built step (nodes, edges, highlighted path, bonus star) and the stats charts."""
from __future__ import annotations

import math

import plotly.graph_objects as go

from app.plots import stats_figure, tree_figure, tree_layout
from core.engine.events import StepEvent, TreeNode, summarize
from fakes import baseline_events, eagle_events

#        root(10)
#       /    |    \
#     a(11) b(12) c(13)        path: root -> a -> d -> f, then the target's own token 99
#     /  \     \
#   d(14) e(15) g(16)
#   |
#   f(17)
NODES = (
    TreeNode(0, -1, 10, 0, 0.0, True),
    TreeNode(1, 0, 11, 1, math.log(0.7), True),
    TreeNode(2, 0, 12, 1, math.log(0.2), False),
    TreeNode(3, 0, 13, 1, math.log(0.05), False),
    TreeNode(4, 1, 14, 2, math.log(0.5), True),
    TreeNode(5, 1, 15, 2, math.log(0.1), False),
    TreeNode(6, 2, 16, 2, math.log(0.1), False),
    TreeNode(7, 4, 17, 3, math.log(0.3), True),
)
STEP = StepEvent(3, "eagle2", (11, 14, 17, 99), NODES, (0, 1, 4, 7), draft_ms=1, verify_ms=2, step_ms=3)


def label(t: int) -> str:
    return f"t{t}"


def trace(fig: go.Figure, name: str):
    found = [t for t in fig.data if t.name == name]
    assert len(found) == 1, [t.name for t in fig.data]
    return found[0]


def segments(tr) -> set[tuple[tuple[float, float], tuple[float, float]]]:
    xs, ys = list(tr.x), list(tr.y)
    out = set()
    for i in range(0, len(xs), 3):
        out.add(((xs[i], ys[i]), (xs[i + 1], ys[i + 1])))
        assert xs[i + 2] is None
    return out


def test_layout_depth_left_to_right_and_parents_centred():
    pos = tree_layout(NODES)
    assert [pos[i][0] for i in range(8)] == [0, 1, 1, 1, 2, 2, 2, 3]
    # leaves in order f, e, g, c take rows 0..3; parents sit between their first and last child
    assert pos[7][1] == 0 and pos[5][1] == 1 and pos[6][1] == 2 and pos[3][1] == 3
    assert pos[4][1] == 0 and pos[1][1] == 0.5 and pos[2][1] == 2
    assert pos[0][1] == (0.5 + 3) / 2


def test_tree_figure_nodes_edges_and_highlighted_path():
    fig = tree_figure(STEP, label)
    pos = tree_layout(NODES)
    accepted, rejected = trace(fig, "accepted"), trace(fig, "rejected")
    assert list(accepted.text) == ["t10", "t11", "t14", "t17"]
    assert sorted(rejected.text) == ["t12", "t13", "t15", "t16"]
    # colour = draft probability exp(score); rejected nodes faded
    assert [round(c, 3) for c in accepted.marker.color] == [1.0, 0.7, 0.5, 0.3]
    assert accepted.marker.opacity == 1.0 and rejected.marker.opacity < 0.5
    # edges: every parent->child once, the accepted ones in their own highlighted trace
    path_edges = segments(trace(fig, "accepted path"))
    other_edges = segments(trace(fig, "draft edges"))
    assert path_edges == {(pos[0], pos[1]), (pos[1], pos[4]), (pos[4], pos[7])}
    assert len(other_edges) == 4 and not (path_edges & other_edges)
    # hover: token, depth, cumulative probability, accepted or not
    row = list(rejected.customdata[list(rejected.text).index("t12")])
    assert row[0] == "t12" and row[1] == 1 and abs(row[2] - 0.2) < 1e-9 and row[3] == "rejected"
    assert "depth" in accepted.hovertemplate and "prob" in accepted.hovertemplate
    # the target's own token after the accepted path
    star = trace(fig, "target's token")
    assert list(star.text) == ["t99"] and star.x[0] == 4 and star.y[0] == pos[7][1]


def test_clipped_step_draws_no_bonus_star():
    clipped = StepEvent(3, "eagle2", (11, 14), NODES, (0, 1, 4, 7), step_ms=3, finished=True)
    fig = tree_figure(clipped, label)
    assert not [t for t in fig.data if t.name == "target's token"]


def test_placeholder_without_tree():
    fig = tree_figure(None, label)
    assert not fig.data and fig.layout.annotations
    prefill = StepEvent(0, "eagle2", (5,), step_ms=1.0)
    assert not tree_figure(prefill, label).data


def test_stats_figure_histogram_depth_acceptance_and_time_split():
    b = summarize(baseline_events("Hello world!", ms=10))
    e = summarize(eagle_events("Hello world!", plan=[2, 3, 0], ms=12))
    fig = stats_figure(b, e)
    names = [t.name for t in fig.data]
    assert names == ["EAGLE-2", "EAGLE-2", "target forward (verify)", "draft head", "other (tree, accept, KV)"]
    assert not fig.data[0].showlegend  # two lanes: one drafting lane needs no legend in the acceptance panels
    assert list(fig.data[0].y) == list(e.accept_hist) == [1, 0, 2, 1]
    assert [round(v, 3) for v in fig.data[1].y] == [0.75, 0.75, 0.25]
    assert list(fig.data[3].x)[0] == 0.0 and abs(list(fig.data[3].x)[1] - e.draft_s) < 1e-12
    assert abs(list(fig.data[4].x)[1] - (e.seconds - e.draft_s - e.verify_s)) < 1e-12  # the bars add up to the run
    fig.to_json()  # serialisable for gr.Plot
    assert not stats_figure(None, None).data


def test_lookup_nodes_get_their_own_trace_and_title():
    """Nodes copied from the context are drawn as their own trace (not coloured by a draft probability they lack)."""
    nodes = (TreeNode(0, -1, 10, 0, 0.0, True, "root"), TreeNode(1, 0, 11, 1, math.log(0.6), False),
             TreeNode(2, 0, 12, 1, 0.0, True, "lookup"), TreeNode(3, 2, 13, 2, 0.0, False, "lookup"))
    ev = StepEvent(5, "eagle2", (12, 99), nodes, (0, 2), step_ms=2.0)
    fig = tree_figure(ev, label)
    looked = trace(fig, "copied from context")
    assert list(looked.text) == ["t12", "t13"] and looked.marker.symbol == "diamond"
    assert list(looked.marker.opacity) == [1.0, 0.35]
    assert list(trace(fig, "accepted").text) == ["t10"] and list(trace(fig, "rejected").text) == ["t11"]
    assert "2 copied from context" in fig.layout.title.text


def test_every_figure_is_theme_neutral():
    """Plots follow the page's light or dark theme: no figure paints its own (white) background, and grid lines are
    a mid-tone that reads on both; the page's CSS recolours text under `.dark` (static/style.css)."""
    from pathlib import Path

    from app.theme import GRID, TRANSPARENT

    st = summarize(eagle_events("Hello world", [2, 1]))
    figs = [tree_figure(STEP, label), tree_figure(None, label), stats_figure(None, None),
            stats_figure(summarize(baseline_events("Hello world")), st)]
    for fig in figs:
        assert fig.layout.paper_bgcolor == TRANSPARENT and fig.layout.plot_bgcolor == TRANSPARENT
        for axis in (fig.layout.xaxis, fig.layout.yaxis):
            assert axis.gridcolor == GRID
    css = (Path(__file__).resolve().parents[2] / "static" / "style.css").read_text()
    assert ".dark .js-plotly-plot" in css and "var(--body-text-color)" in css
