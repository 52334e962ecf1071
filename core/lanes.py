"""A lane: one racer of the app's race and of the bench, named, with its decoder and the tree it drafts with.

The app races `Lane`s by compute time (app/handlers.py, app/race.py) and the bench times them back to back
(core/bench/cli.py). On the bench's command line a lane is `--lane NAME=HEAD@TREE` (repeatable):

- HEAD: `baseline` (plain decoding), `head` (the run's --head), `lookup` (no head: the context-lookup chain alone)
  or a head folder of any registered kind (EAGLE-1/2, EAGLE-3, Medusa: core/drafters/heads.py);
- TREE: total_tokens,depth,top_k[,lookup[,stop_below]] (TreeConfig.parse); left out (`NAME=HEAD`), the run's tree.

Today's method names stay as shorthands for the lanes they are: `baseline` = baseline, `eagle2` = head@run's tree,
`eagle2-head` = head@(--head-tree or the run's tree, lookup 0), `eagle2-chain` = head@(T+1,T,1,0 for depth T >=
6), `lookup` = lookup@1,1,1,10, `medusa` = MEDUSA_FOLDER@eagle2-head's tree, `eagle2-head-b` / `eagle2-chain-b` =
the same with --head-b's folder (core/bench/runners.py make_runners builds them).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

from core.engine.config import DecodeConfig, TreeConfig
from core.engine.events import StepEvent

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
SPECIAL_HEADS = ("baseline", "head", "lookup")


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


def build_lane(spec: LaneSpec, target, baseline, eagle) -> Lane:
    """The lane a spec names, on the loaded target: `baseline` / `head` reuse the run's decoders, `lookup` and head
    folders are built by core.pipeline.decoder_for (the one place a decoder is built)."""
    from core.pipeline import decoder_for

    if spec.head == "baseline":
        return Lane(spec.name, baseline)
    if spec.head == "head":
        return Lane(spec.name, eagle, spec.tree)
    head = None if spec.head == "lookup" else spec.head
    return Lane(spec.name, decoder_for(head, target, spec.name), spec.tree)
