"""Per-user data kept in gr.State between events: plain, deep-copyable records only (no models, no tensors).

While a request runs, the state holds its live RunRecord (every StepEvent of both methods; the Stop button flips its
`stop` flag). When the request ends, the state keeps only `RunRecord.compact()`: no prompt, no events, and each
verify step's draft tree packed into flat arrays (about 13 bytes a node instead of a TreeNode object), which is all
the step slider needs. The gr.State also expires (STATE_TTL_S, its time_to_live), so a session's record does not outlive
its use.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from pathlib import Path

from app.lanes import LaneRow, lane_rows
from core.engine.events import StepEvent, TreeNode

STATE_TTL_S = 1800  # every gr.State expires 30 min after its last update (Gradio keeps a closed tab's 1 h)
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
    method: str = "eagle2"

    @classmethod
    def pack(cls, ev: StepEvent) -> "PackedTree":
        nodes = ev.tree
        return cls(ev.step, array("i", (n.parent for n in nodes)), array("i", (n.token_id for n in nodes)),
                   array("f", (n.score for n in nodes)), bytes(SOURCES.index(n.source) for n in nodes),
                   tuple(ev.accepted_path), tuple(ev.new_token_ids), ev.method)

    def unpack(self) -> StepEvent:
        """The StepEvent tree_figure draws (timings are not kept: the slider shows trees, not times)."""
        depth: list[int] = []
        for p in self.parents:
            depth.append(0 if p < 0 else depth[p] + 1)
        path = set(self.accepted_path)
        nodes = tuple(TreeNode(i, p, t, d, float(s), i in path, SOURCES[src]) for i, (p, t, d, s, src)
                      in enumerate(zip(self.parents, self.tokens, depth, self.scores, self.sources)))
        return StepEvent(self.step, self.method, self.new_token_ids, nodes, self.accepted_path)


@dataclass(frozen=True)
class Choice:
    """A visitor's model and head, kept in that visitor's session state: a preset (or the start-up model) by name and
    the head folder bound to it (None: the model's own head). Every request of the session runs on it."""

    model: str
    head: str | None = None

    @property
    def head_name(self) -> str:
        """The head's folder name, "" for the model's own head."""
        return Path(self.head).name if self.head else ""

    @property
    def name(self) -> str:
        """'gemma-3-270m', or 'gemma-3-270m + my-head' with a head of the visitor's."""
        return f"{self.model} + {self.head_name}" if self.head else self.model


@dataclass
class RunRecord:
    """One request: its inputs and every step event of each lane (plain decoding, EAGLE-2, and the token-level
    drafter when one was asked for), keyed by lane slot (app/lanes.py), so a stopped or finished run can be re-shown
    and its draft trees scrubbed."""

    prompt: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    greedy: bool = True
    tree_depth: int = 0
    events: dict[str, list[StepEvent]] = field(default_factory=dict)  # lane slot -> its steps (a live record)
    compare_kind: str = "none"  # "none" | "medusa" | "lookup" (app/inputs.py COMPARE)
    model: str = ""  # the model it ran on (a preset or the start-up model): history, links, the log line
    head: str = ""  # the head folder the visitor bound (its path here), "" for the model's own head
    stop: bool = False  # set by the Stop button; the running request reads it between decode steps
    note: str = ""  # why the run stopped early (the time budget), shown to the user
    stops: tuple[str, ...] = ()  # stop strings: a lane ends once its text contains one (core/engine/stops.py)
    packed: dict[str, list[PackedTree]] = field(default_factory=dict)  # only in a compact record: slot -> trees
    messages: list | None = None  # a conversation turn: the history asked, ending with this user turn (else None)
    answer_ids: tuple[int, ...] = ()  # only in a compact record of a conversation turn: the baseline lane's ids
    settings: dict = field(default_factory=dict)  # the request's resolved settings (tree filled in), for links
    finished_run: dict | None = None  # a finished run's record and views, for the history (app/history.py)

    @property
    def choice(self) -> Choice:
        """The model and head this request ran on."""
        return Choice(self.model, self.head or None)

    @property
    def rows(self) -> tuple[LaneRow, ...]:
        """The lanes this request races (slot, title, method), in panel order."""
        return lane_rows(self.compare_kind)

    @property
    def lanes(self) -> tuple[str, ...]:
        """The slots of the lanes this request races, in panel order."""
        return tuple(row.slot for row in self.rows)

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(row.method for row in self.rows)

    def steps(self, lane: str) -> list[StepEvent]:
        """A lane's steps so far (empty for a lane that has none, or in a compact record)."""
        return self.events.get(lane, [])

    def add(self, lane: str, ev: StepEvent) -> None:
        """Record one step of a lane."""
        self.events.setdefault(lane, []).append(ev)

    @property
    def live(self) -> bool:
        """True while the record holds step events (a running or just-stopped request, not a compact record)."""
        return any(self.events.values())

    def ids(self, side: str) -> list[int]:
        return [t for e in self.steps(side) for t in e.new_token_ids]

    def finished(self, side: str) -> bool:
        events = self.steps(side)
        return bool(events) and events[-1].finished

    def lane_tree_steps(self, lane: str = "eagle") -> list[StepEvent]:
        """A drafting lane's steps that verified a draft tree (the prefill step has none)."""
        if self.packed.get(lane):
            return [t.unpack() for t in self.packed[lane]]
        return [e for e in self.steps(lane) if e.tree]

    @property
    def tree_steps(self) -> list[StepEvent]:
        return self.lane_tree_steps("eagle")

    def lane_tree_count(self, lane: str = "eagle") -> int:
        packed = self.packed.get(lane)
        return len(packed) if packed else sum(1 for e in self.steps(lane) if e.tree)

    @property
    def tree_count(self) -> int:
        return self.lane_tree_count("eagle")

    def tree_step(self, i: int, lane: str = "eagle") -> StepEvent:
        """The i-th (0-based) verify step's tree, unpacking only that one from a compact record."""
        packed = self.packed.get(lane)
        return packed[i].unpack() if packed else self.lane_tree_steps(lane)[i]

    def compact(self) -> "RunRecord":
        """A new record with what the UI needs after the run (the step slider's trees); the live one is untouched."""
        packed = {row.slot: [PackedTree.pack(e) for e in self.steps(row.slot) if e.tree]
                  for row in self.rows if row.drafts}
        return RunRecord(greedy=self.greedy, tree_depth=self.tree_depth, model=self.model, head=self.head, stop=True,
                         note=self.note, packed=packed, compare_kind=self.compare_kind, messages=self.messages,
                         answer_ids=tuple(self.ids("baseline")) if self.messages is not None else (),
                         settings=dict(self.settings), finished_run=self.finished_run)


def drop_record(record: RunRecord | None) -> None:
    """gr.State delete_callback: when a session's state expires or its tab closes, a run still going stops."""
    if isinstance(record, RunRecord):
        record.stop = True
