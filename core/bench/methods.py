"""The bench's method names: the peers (core/bench/peers.py, `llamacpp` one row per --gguf file) and shorthands for lanes (core/lanes.py).

Every method that is not a peer is the lane it spells, turned into a `LaneSpec` when the arguments are validated, so
the runners are built from lanes alone; `--lane NAME=HEAD@TREE` adds lanes under names of its own. A shorthand whose
tree follows the run's (left to `--tree auto` until the model loads) carries a tree rule instead (`TREE_RULES`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from core.bench.peers import FILE_PEERS, PEERS, PLD_TOKENS
from core.engine.config import TreeConfig
from core.lanes import LaneSpec

SHORTHANDS = ("baseline", "eagle2", "eagle2-head", "eagle2-chain", "lookup", "eagle2-head-b", "eagle2-chain-b",
              "eagle2-greedy-tree", "medusa")
METHODS = (*PEERS, *FILE_PEERS, *SHORTHANDS)
B_METHODS = ("eagle2-head-b", "eagle2-chain-b")  # the same variants with --head-b (two heads, one interleaved run)
LOOKUP_TREE = TreeConfig(total_tokens=1, depth=1, top_k=1, lookup=PLD_TOKENS)  # the lookup chain alone, no head


def shorthand_lanes(head_tree: TreeConfig | None = None, head_tree_b: TreeConfig | None = None,
                    head_b: str = "", medusa: str = "") -> dict[str, LaneSpec]:
    """Shorthand -> the lane it spells. `head_tree` / `head_tree_b`: the head-alone trees (--head-tree,
    --head-tree-b; None: the run's tree without lookup); `head_b`, `medusa`: the folders of --head-b and the Medusa
    head."""
    alone = replace(head_tree, lookup=0) if head_tree else None
    alone_b = replace(head_tree_b, lookup=0) if head_tree_b else alone
    specs = [LaneSpec("baseline", "baseline"),
             LaneSpec("eagle2", "head"),
             LaneSpec("eagle2-head", "head", alone, "alone"),
             LaneSpec("eagle2-chain", "head", None, "chain"),
             LaneSpec("lookup", "lookup", LOOKUP_TREE),
             LaneSpec("eagle2-head-b", head_b, alone_b, "alone"),
             LaneSpec("eagle2-chain-b", head_b, None, "chain"),
             LaneSpec("eagle2-greedy-tree", "head", None, "greedy"),
             LaneSpec("medusa", medusa, alone, "alone")]
    return {s.name: s for s in specs}


def method_lanes(methods: Iterable[str], **heads) -> tuple[LaneSpec, ...]:
    """The lanes of the methods that are not peers, in order (`heads`: shorthand_lanes' arguments)."""
    table = shorthand_lanes(**heads)
    return tuple(table[m] for m in methods if m not in PEERS and m not in FILE_PEERS)


def uses_run_tree(lanes: Iterable[LaneSpec]) -> bool:
    """Whether any lane drafts with (a form of) the run's tree (--tree): eagle2 and the chains always, the
    head-alone methods when no --head-tree is given, a --lane without its own tree. Only then does `--tree auto`
    need its calibration (about a minute on a CPU)."""
    return any(s.reads_run_tree for s in lanes)
