"""Per-user data kept in gr.State between events: plain, deep-copyable records only (no models, no tensors)."""
from __future__ import annotations

from dataclasses import dataclass, field

from core.events import StepEvent


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

    def ids(self, side: str) -> list[int]:
        return [t for e in getattr(self, side) for t in e.new_token_ids]

    def finished(self, side: str) -> bool:
        events = getattr(self, side)
        return bool(events) and events[-1].finished

    @property
    def tree_steps(self) -> list[StepEvent]:
        """EAGLE-2 steps that verified a draft tree (the prefill step has none)."""
        return [e for e in self.eagle if e.tree]
