"""Per-user data kept in gr.State between events: plain, deep-copyable records only (no models, no tensors).

While a request runs, the state holds its live RunRecord (every StepEvent of both methods; the Stop button flips its
`stop` flag). When the request ends, the state keeps only `RunRecord.compact()`: no prompt, no events, and each
verify step's draft tree packed into flat arrays (about 13 bytes a node instead of a TreeNode object), which is all
the step slider needs. The gr.State also expires (app/ui.py: time_to_live), so a session's record does not outlive
its use.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from core.events import StepEvent, TreeNode

SOURCES = ("root", "head", "lookup")


@dataclass(frozen=True)
class PackedTree:
    """One EAGLE-2 verify step's draft tree in flat arrays: what tree_figure needs to redraw it, nothing more."""

    step: int
    parents: array  # 'i', one per node, -1 for the root
    tokens: array  # 'i'
    scores: array  # 'f', cumulative draft log-probability
    sources: bytes  # index into SOURCES per node
    accepted_path: tuple[int, ...]
    new_token_ids: tuple[int, ...]

    @classmethod
    def pack(cls, ev: StepEvent) -> "PackedTree":
        nodes = ev.tree
        return cls(ev.step, array("i", (n.parent for n in nodes)), array("i", (n.token_id for n in nodes)),
                   array("f", (n.score for n in nodes)), bytes(SOURCES.index(n.source) for n in nodes),
                   tuple(ev.accepted_path), tuple(ev.new_token_ids))

    def unpack(self) -> StepEvent:
        """The StepEvent tree_figure draws (timings are not kept: the slider shows trees, not times)."""
        depth: list[int] = []
        for p in self.parents:
            depth.append(0 if p < 0 else depth[p] + 1)
        path = set(self.accepted_path)
        nodes = tuple(TreeNode(i, p, t, d, float(s), i in path, SOURCES[src]) for i, (p, t, d, s, src)
                      in enumerate(zip(self.parents, self.tokens, depth, self.scores, self.sources)))
        return StepEvent(self.step, "eagle2", self.new_token_ids, nodes, self.accepted_path)


@dataclass
class RunRecord:
    """One request: its inputs and every step event of both methods, so a stopped or finished run can be re-shown
    and its draft trees scrubbed through."""

    prompt: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    greedy: bool = True
    tree_depth: int = 0
    baseline: list[StepEvent] = field(default_factory=list)
    eagle: list[StepEvent] = field(default_factory=list)
    model: str = ""  # target name, for the per-request log line
    stop: bool = False  # set by the Stop button; the running request reads it between decode steps
    note: str = ""  # why the run stopped early (the time budget), shown to the user
    trees: list[PackedTree] = field(default_factory=list)  # only in a compact record

    def ids(self, side: str) -> list[int]:
        return [t for e in getattr(self, side) for t in e.new_token_ids]

    def finished(self, side: str) -> bool:
        events = getattr(self, side)
        return bool(events) and events[-1].finished

    @property
    def tree_steps(self) -> list[StepEvent]:
        """EAGLE-2 steps that verified a draft tree (the prefill step has none)."""
        if self.trees:
            return [t.unpack() for t in self.trees]
        return [e for e in self.eagle if e.tree]

    @property
    def tree_count(self) -> int:
        return len(self.trees) if self.trees else sum(1 for e in self.eagle if e.tree)

    def tree_step(self, i: int) -> StepEvent:
        """The i-th (0-based) verify step's tree, unpacking only that one from a compact record."""
        return self.trees[i].unpack() if self.trees else self.tree_steps[i]

    def compact(self) -> "RunRecord":
        """A new record with what the UI needs after the run (the step slider's trees); the live one is untouched."""
        return RunRecord(greedy=self.greedy, tree_depth=self.tree_depth, model=self.model, stop=True,
                         note=self.note, trees=[PackedTree.pack(e) for e in self.eagle if e.tree])


def drop_record(record: RunRecord | None) -> None:
    """gr.State delete_callback: when a session's state expires or its tab closes, a run still going stops."""
    if isinstance(record, RunRecord):
        record.stop = True
