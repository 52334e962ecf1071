"""The benchmark's validated plan: everything checkable before a model loads (core/bench/cli.py builds it, the
runners in core/bench/runners.py read it)."""
from __future__ import annotations

from dataclasses import dataclass

from core.engine.config import DecodeConfig, TreeConfig
from core.lanes import LaneSpec


@dataclass(frozen=True)
class Plan:
    """Validated arguments (everything checkable before a model loads)."""

    methods: tuple[str, ...]
    categories: frozenset[str]
    tree: TreeConfig | None  # None = auto
    head_tree: TreeConfig | None  # None = the run's tree
    decode: DecodeConfig  # sampling seed is replaced per prompt
    head_tree_b: TreeConfig | None = None  # eagle2-head-b's head-alone tree; None = head_tree's
    lanes: tuple[LaneSpec, ...] = ()  # --lane NAME=HEAD@TREE; their names close `methods` (core/lanes.py)
