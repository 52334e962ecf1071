"""A lane: one racer of the app's race and of the bench, named, with its decoder and the tree it drafts with.

The app races `Lane`s by compute time (app/handlers.py, app/race.py) and the bench times them back to back
(core/bench/protocol.py). On the bench's command line a lane is `--lane NAME=HEAD@TREE` (repeatable):

- HEAD: `baseline` (plain decoding), `head` (the run's --head), `lookup` (no head: the context-lookup chain alone)
  or a head folder of any registered kind (EAGLE-1/2, EAGLE-3, Medusa: core/drafters/heads.py);
- TREE: total_tokens,depth,top_k[,lookup[,stop_below]] (TreeConfig.parse); left out (`NAME=HEAD`), the run's tree.

The bench's method names are shorthands for lanes (core/bench/methods.py turns them into `LaneSpec`s): `baseline` =
baseline, `eagle2` = head@run's tree, `eagle2-head` = head@(--head-tree or the run's tree, lookup 0), `eagle2-chain`
= head@(T+1,T,1,0 for depth T >= 6), `lookup` = lookup@1,1,1,10, `medusa` = MEDUSA_FOLDER@eagle2-head's tree,
`eagle2-head-b` / `eagle2-chain-b` = the same with --head-b's folder. A shorthand whose tree derives from the run's
names the rule (`TREE_RULES`) instead of a tree, since `--tree auto` plans the run's tree only once the model loads.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping

from core.engine.config import DecodeConfig, TreeConfig
from core.engine.events import StepEvent

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
SPECIAL_HEADS = ("baseline", "head", "lookup")


def chain_tree(tree: TreeConfig) -> TreeConfig:
    """The head as one chain (top-k 1, no lookup), at least as deep as the engine default so n-alpha is measured to
    depth 5 even when `auto` chose a shallow tree."""
    depth = max(tree.depth, TreeConfig().depth)
    return TreeConfig(total_tokens=depth + 1, depth=depth, top_k=1, lookup=0)


# Rule -> the tree a lane without one of its own drafts with, read from the run's resolved trees by name: "run"
# (--tree, once `auto` has planned it) and "greedy" (what `auto` plans from a greedy calibration).
TREE_RULES: dict[str, Callable[[Mapping[str, TreeConfig]], TreeConfig]] = {
    "run": lambda trees: trees["run"],
    "alone": lambda trees: replace(trees["run"], lookup=0),  # the head alone: no context-lookup chain
    "chain": lambda trees: chain_tree(trees["run"]),  # the head as a single chain
    "greedy": lambda trees: trees["greedy"],  # auto's greedy plan (the bench's eagle2-greedy-tree)
}


@dataclass(frozen=True)
class Lane:
    """One racer: `name` (what the UI and the bench's rows call it), its decoder (BaselineDecoder or Eagle2Decoder)
    and the tree it drafts with (None: the request's or the run's tree)."""

    name: str
    decoder: Any
    tree: TreeConfig | None = None

    def config(self, cfg: DecodeConfig) -> DecodeConfig:
        """The run's decode settings with this lane's tree, when it has its own."""
        return cfg if self.tree is None else replace(cfg, tree=self.tree)

    def generate(self, prompt_ids: list[int], cfg: DecodeConfig,
                 should_stop: Callable[[], bool] | None = None) -> Iterator[StepEvent]:
        return self.decoder.generate(prompt_ids, self.config(cfg), should_stop)


@dataclass(frozen=True)
class LaneSpec:
    """A lane as written on the command line, checked before any model loads."""

    name: str
    head: str  # "baseline" | "head" | "lookup" | a head folder
    tree: TreeConfig | None = None
    rule: str = "run"  # without a tree of its own: which of the run's trees, in which form (TREE_RULES)

    @property
    def reads_run_tree(self) -> bool:
        """Whether the lane drafts with (a form of) the run's --tree: only then must `--tree auto` plan one."""
        return self.head != "baseline" and self.tree is None and self.rule != "greedy"

    def tree_in(self, trees: Mapping[str, TreeConfig] | None = None) -> TreeConfig | None:
        """The tree the lane drafts with: its own, else its rule over the run's resolved `trees`; None where it is
        the run's tree as the request gives it (rule "run")."""
        if self.tree is not None or self.rule == "run":
            return self.tree
        return TREE_RULES[self.rule](trees or {})

    @classmethod
    def parse(cls, text: str) -> "LaneSpec":
        """'NAME=HEAD@TREE' or 'NAME=HEAD'; ValueError with one line when it is not."""
        name, eq, rest = text.strip().partition("=")
        if not eq or not NAME.fullmatch(name) or not rest:
            raise ValueError(f"--lane {text!r}: write NAME=HEAD@TREE or NAME=HEAD (NAME: letters, digits, _.+-)")
        head, at, tree = rest.rpartition("@") if "@" in rest else (rest, "", "")
        if not head:
            raise ValueError(f"--lane {text!r}: no HEAD before '@' (baseline, head, lookup or a head folder)")
        parsed = TreeConfig.parse(tree) if at else None  # ValueError names the bad field
        if head == "baseline" and parsed is not None:
            raise ValueError(f"--lane {text!r}: plain decoding drafts no tree")
        return cls(name, head, parsed)


def build_lane(spec: LaneSpec, target, baseline, eagle, trees: Mapping[str, TreeConfig] | None = None,
               built: dict[str, Any] | None = None) -> Lane:
    """The lane a spec names, on the loaded target: `baseline` / `head` reuse the run's decoders, `lookup` and head
    folders are built by core.pipeline.decoder_for (the one place a decoder is built), once per run when `built`
    keeps them by HEAD. `trees`: the run's resolved trees, for a spec with a tree rule (LaneSpec.tree_in)."""
    from core.pipeline import decoder_for

    tree = spec.tree_in(trees)
    if spec.head == "baseline":
        return Lane(spec.name, baseline)
    if spec.head == "head":
        return Lane(spec.name, eagle, tree)
    cache = {} if built is None else built
    if spec.head not in cache:
        cache[spec.head] = decoder_for(None if spec.head == "lookup" else spec.head, target, spec.name)
    return Lane(spec.name, cache[spec.head], tree)
