"""Pure plotly figures: the EAGLE-2 draft tree of one step, and the request's acceptance / timing charts.

Plotly has no tree layout, so coordinates are computed here: x = depth below the root, y = leaf order (children in
index order, which is descending draft score among siblings), a parent centred on its children.
"""
from __future__ import annotations

import html

import math
from typing import Callable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.theme import themed
from core.engine.events import RunStats, StepEvent, TreeNode

ACCEPT = "#e4572e"  # accepted path
EDGE = "#b8bec8"
BONUS = "#7c3aed"  # violet: visible on the light and the dark theme
LOOKUP = "#f4a259"  # nodes copied from the context (core/engine/lookup.py)
PROB_SCALE = "Viridis"


def tree_layout(nodes: Sequence[TreeNode]) -> dict[int, tuple[float, float]]:
    """node_id -> (x, y): x = depth, y = leaf rank (0 at the top, growing downwards), parents centred on children."""
    kids: dict[int, list[int]] = {n.node_id: [] for n in nodes}
    for n in nodes:
        if n.parent >= 0:
            kids[n.parent].append(n.node_id)
    depth = {n.node_id: n.depth for n in nodes}
    pos: dict[int, tuple[float, float]] = {}
    next_leaf = 0.0

    def place(i: int) -> float:  # iterative would be overkill: depth <= 32
        nonlocal next_leaf
        if not kids[i]:
            y, next_leaf = next_leaf, next_leaf + 1.0
        else:
            ys = [place(c) for c in kids[i]]
            y = (ys[0] + ys[-1]) / 2
        pos[i] = (float(depth[i]), y)
        return y

    roots = [n.node_id for n in nodes if n.parent < 0]
    for r in roots:
        place(r)
    return pos


def tree_figure(
    event: StepEvent | None,
    label: Callable[[int], str],
    title: str = "",
) -> go.Figure:
    """Draft tree of one EAGLE-2 step: nodes coloured by draft probability exp(score), accepted path highlighted,
    rejected nodes faded, context-lookup nodes as orange diamonds; the target's own (bonus) token is drawn as a star
    after the accepted path. Token labels are HTML-escaped: plotly renders <b>, <sup>, <br> ... in text and hover
    labels, and tokens such as Gemma's "<b>" would format the plot instead of showing as text.
    Drawn in layers, bottom first: edges, the head's nodes, the lookup nodes, the bonus token; then the axes."""
    fig = go.Figure()
    if event is None or not event.tree:
        return _placeholder(fig, "The draft tree of each EAGLE-2 step appears here while generating.")
    raw_label = label
    label = lambda token_id: html.escape(raw_label(token_id), quote=False)  # noqa: E731
    pos = tree_layout(event.tree)
    path = set(event.accepted_path)
    _add_edges(fig, event.tree, pos, path)
    for accepted in (False, True):
        _add_head_nodes(fig, [n for n in event.tree if (n.node_id in path) == accepted and n.source != "lookup"],
                        pos, label, accepted)
    _add_lookup_nodes(fig, [n for n in event.tree if n.source == "lookup"], pos, path, label)
    bonus = _add_bonus(fig, event, pos, label)
    max_x = max(x for x, _ in pos.values()) + (1 if bonus is not None else 0)
    fig.update_layout(
        title=dict(text=title or _tree_title(event), x=0.01, font=dict(size=14)),
        height=int(max(360, min(900, 110 + 14 * len(event.tree)))),  # fixed per request size: no jumping while live
        margin=dict(l=10, r=10, t=50, b=30),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
        hoverlabel=dict(bgcolor="white"),
    )
    themed(fig)
    fig.update_xaxes(title_text="draft depth", dtick=1, range=[-0.3, max_x + 0.9], showgrid=True, zeroline=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    return fig


def _add_edges(fig: go.Figure, nodes: Sequence[TreeNode], pos: dict[int, tuple[float, float]],
               path: set[int]) -> None:
    """Two line traces: every draft edge (thin) and the accepted path's edges (thick) over them."""
    ex, ey, ax, ay = [], [], [], []
    for n in nodes:
        if n.parent < 0:
            continue
        (x0, y0), (x1, y1) = pos[n.parent], pos[n.node_id]
        xs, ys = (ax, ay) if (n.node_id in path and n.parent in path) else (ex, ey)
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", name="draft edges", hoverinfo="skip",
                             line=dict(color=EDGE, width=1.2), showlegend=False))
    fig.add_trace(go.Scatter(x=ax, y=ay, mode="lines", name="accepted path", hoverinfo="skip",
                             line=dict(color=ACCEPT, width=4)))


def _add_head_nodes(fig: go.Figure, group: list[TreeNode], pos: dict[int, tuple[float, float]],
                    label: Callable[[int], str], accepted: bool) -> None:
    """The head's nodes (and the root) of one kind, accepted or rejected: sized and coloured by draft probability;
    only the accepted trace carries the colour bar. Nothing for an empty group."""
    if not group:
        return
    probs = [math.exp(n.score) for n in group]
    fig.add_trace(go.Scatter(
        x=[pos[n.node_id][0] for n in group],
        y=[pos[n.node_id][1] for n in group],
        mode="markers+text",
        name="accepted" if accepted else "rejected",
        text=[label(n.token_id) for n in group],
        textposition="middle right",
        textfont=dict(size=12 if accepted else 11, color="#111" if accepted else "rgba(60,60,60,0.55)"),
        marker=dict(
            size=[9 + 14 * p for p in probs],
            color=probs,
            cmin=0.0,
            cmax=1.0,
            colorscale=PROB_SCALE,
            opacity=1.0 if accepted else 0.35,
            line=dict(color=ACCEPT if accepted else "rgba(0,0,0,0.25)", width=3 if accepted else 0.5),
            colorbar=dict(title=dict(text="draft<br>prob."), thickness=10, len=0.6) if accepted else None,
            showscale=accepted,
        ),
        customdata=[
            [label(n.token_id), n.depth, p, "root (last committed token)" if n.parent < 0
             else ("accepted" if accepted else "rejected"), n.token_id]
            for n, p in zip(group, probs)
        ],
        hovertemplate="<b>%{customdata[0]}</b> (id %{customdata[4]})<br>depth %{customdata[1]}"
                      "<br>cumulative draft prob. %{customdata[2]:.3f}<br>%{customdata[3]}<extra></extra>",
    ))


def _add_lookup_nodes(fig: go.Figure, looked: list[TreeNode], pos: dict[int, tuple[float, float]], path: set[int],
                      label: Callable[[int], str]) -> None:
    """The nodes copied from the context (orange diamonds), accepted ones outlined; nothing when there are none."""
    if not looked:
        return
    fig.add_trace(go.Scatter(
        x=[pos[n.node_id][0] for n in looked], y=[pos[n.node_id][1] for n in looked], mode="markers+text",
        name="copied from context", text=[label(n.token_id) for n in looked], textposition="middle right",
        textfont=dict(size=11, color=["#111" if n.node_id in path else "rgba(60,60,60,0.55)" for n in looked]),
        marker=dict(symbol="diamond", size=13, color=LOOKUP,
                    opacity=[1.0 if n.node_id in path else 0.35 for n in looked],
                    line=dict(color=[ACCEPT if n.node_id in path else "rgba(0,0,0,0.25)" for n in looked],
                              width=[3 if n.node_id in path else 0.5 for n in looked])),
        customdata=[[label(n.token_id), n.depth, "accepted" if n.node_id in path else "rejected", n.token_id]
                    for n in looked],
        hovertemplate="<b>%{customdata[0]}</b> (id %{customdata[3]})<br>depth %{customdata[1]}<br>copied from "
                      "earlier text (context lookup)<br>%{customdata[2]}<extra></extra>",
    ))


def _add_bonus(fig: go.Figure, event: StepEvent, pos: dict[int, tuple[float, float]],
               label: Callable[[int], str]) -> int | None:
    """The target's own token after the accepted path, a star one level deeper on a dotted edge. Returns the
    token (None when the step was clipped before it; then, or with no accepted path, nothing is drawn)."""
    bonus = _bonus_token(event)
    if bonus is not None and event.accepted_path:
        end = pos[event.accepted_path[-1]]
        bx, by = end[0] + 1, end[1]
        fig.add_trace(go.Scatter(x=[end[0], bx], y=[end[1], by], mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=BONUS, width=2, dash="dot")))
        fig.add_trace(go.Scatter(
            x=[bx], y=[by], mode="markers+text", name="target's token", text=[label(bonus)],
            textposition="middle right", marker=dict(symbol="star", size=16, color=BONUS),
            customdata=[[label(bonus), bonus]],
            hovertemplate="<b>%{customdata[0]}</b> (id %{customdata[1]})<br>the target's own token after the "
                          "accepted path (bonus)<extra></extra>",
        ))
    return bonus


def _bonus_token(event: StepEvent) -> int | None:
    """The target's own token of the step, if the step was not clipped before it (EOS / max tokens)."""
    if len(event.new_token_ids) == len(event.accepted_path) and event.new_token_ids:
        return event.new_token_ids[-1]
    return None


def _tree_title(event: StepEvent) -> str:
    drafted = len(event.tree) - 1
    copied = sum(n.source == "lookup" for n in event.tree)
    extra = f" ({copied} copied from context)" if copied else ""
    return (f"Step {event.step}: {drafted} draft tokens{extra} verified in one target pass, "
            f"{event.accepted_drafts} accepted + 1 target token")


def _placeholder(fig: go.Figure, text: str) -> go.Figure:
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=13, color="#6b7280"))
    fig.update_layout(height=320, margin=dict(l=10, r=10, t=30, b=10))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return themed(fig)


def stats_figure(base: RunStats | None, eagle: RunStats | None, compare: RunStats | None = None,
                 compare_label: str = "") -> go.Figure:
    """Three panels: accepted-length histogram, acceptance by draft depth (EAGLE-2, and the token-level lane side by
    side when one races), compute-time split per lane."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09, subplot_titles=(
        "Accepted drafts per step", "Per-position acceptance rate (P[path reaches d])", "Compute time split"))
    drafting = [(n, st, c) for n, st, c in ((compare_label or "token-level", compare, "#e45756"),
                                             ("EAGLE-2", eagle, "#4c78a8")) if st is not None]
    show = compare is not None  # a legend only when two drafting lanes share the panels
    for name, st, color in drafting:
        if st.accept_hist:
            hist = list(st.accept_hist)
            fig.add_trace(go.Bar(x=list(range(len(hist))), y=hist, name=name, marker_color=color, legendgroup=name,
                                 hovertemplate=f"{name}: %{{y}} steps accepted %{{x}} drafts<extra></extra>",
                                 showlegend=show), row=1, col=1)
        if st.depth_accept:
            da = list(st.depth_accept)
            fig.add_trace(go.Bar(x=list(range(1, len(da) + 1)), y=da, name=name, legendgroup=name,
                                 marker_color=color if show else "#54a24b", showlegend=False,
                                 hovertemplate=f"{name}: depth %{{x}}: %{{y:.1%}} of steps<extra></extra>"),
                          row=1, col=2)
    if base is not None or eagle is not None:
        lanes = [("Baseline", base)] + ([(compare_label or "token-level", compare)] if show else []) + [
            ("EAGLE-2", eagle)]
        names = [n for n, _ in lanes]
        draft = [st.draft_s if st is not None and n != "Baseline" else 0.0 for n, st in lanes]
        verify = [st.verify_s if st is not None else 0.0 for _, st in lanes]
        other = [st.other_s if st is not None else 0.0 for _, st in lanes]
        # stacked by hand (base=) in one offset group: the other panels group their bars side by side
        after_verify = [v + d for v, d in zip(verify, draft)]
        fig.add_trace(go.Bar(y=names, x=verify, orientation="h", name="target forward (verify)", offsetgroup="t",
                             marker_color="#72b7b2", hovertemplate="%{x:.2f} s<extra>target forward</extra>"),
                      row=1, col=3)
        fig.add_trace(go.Bar(y=names, x=draft, base=verify, orientation="h", name="draft head", offsetgroup="t",
                             marker_color="#f58518", hovertemplate="%{x:.2f} s<extra>draft</extra>"),
                      row=1, col=3)
        fig.add_trace(go.Bar(y=names, x=other, base=after_verify, orientation="h", name="other (tree, accept, KV)",
                             offsetgroup="t",
                             marker_color="#bab0ac", hovertemplate="%{x:.2f} s<extra>other</extra>"),
                      row=1, col=3)
    fig.update_layout(barmode="group", height=300, margin=dict(l=10, r=10, t=40, b=40),
                      legend=dict(orientation="h", yanchor="top", y=-0.18, xanchor="right", x=1.0),
                      font=dict(size=11))
    fig.update_xaxes(title_text="accepted drafts", dtick=1, row=1, col=1)
    fig.update_xaxes(title_text="draft depth", dtick=1, row=1, col=2)
    fig.update_yaxes(range=[0, 1], tickformat=".0%", row=1, col=2)
    fig.update_xaxes(title_text="seconds", row=1, col=3)
    fig.update_annotations(font_size=12)
    return themed(fig)
