"""Plots that follow the page's light or dark theme.

A plotly figure is drawn once on the server and cannot know the visitor's colour scheme, so figures are made
theme-neutral here (transparent paper and plot area, so the page's own background shows through) and the page's
CSS (static/style.css, "plots follow the theme") colours their text and grid lines from Gradio's CSS variables
under its `.dark` class. Nothing here depends on the client: `themed()` is pure and idempotent.
"""
from __future__ import annotations

import plotly.graph_objects as go

TRANSPARENT = "rgba(0,0,0,0)"
# mid-tone colours that read on white and on Gradio's dark background alike (the CSS recolours text, not marks)
NEUTRAL_TEXT = "#6b7280"
GRID = "rgba(128,128,128,0.22)"


def themed(fig: go.Figure) -> go.Figure:
    """The figure with transparent paper and plot backgrounds and theme-neutral grid lines (in place; returned)."""
    fig.update_layout(paper_bgcolor=TRANSPARENT, plot_bgcolor=TRANSPARENT)
    fig.update_xaxes(gridcolor=GRID, zerolinecolor=GRID)
    fig.update_yaxes(gridcolor=GRID, zerolinecolor=GRID)
    return fig
