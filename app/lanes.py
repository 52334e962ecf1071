"""The app's lanes as data: one table of (slot, title, method) that the race, the rendering, the history and `/run`
all read, and the one speedup formula.

A *slot* is where a lane lives in the page and in a RunRecord (its events, its output panel, its tree): "baseline",
"eagle", and "compare" for the token-level drafter a request may add. The *title* is what people read ("EAGLE-2",
"Medusa"), the *method* the key a finished run's JSON uses ("eagle2", "medusa"). Pure: no gradio, no tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from core.engine.events import RunStats


@dataclass(frozen=True)
class LaneRow:
    """One lane of the table: its slot in the page and the record, its title, its method name in results."""

    slot: str
    title: str
    method: str

    @property
    def drafts(self) -> bool:
        """True for a speculative lane (it verifies draft trees); plain decoding drafts nothing."""
        return self.slot != "baseline"


BASELINE = LaneRow("baseline", "Baseline", "baseline")
EAGLE = LaneRow("eagle", "EAGLE-2", "eagle2")
# the token-level drafters a request may race in the "compare" slot, by the request's `compare` value
TOKEN_LEVEL = MappingProxyType({"medusa": LaneRow("compare", "Medusa", "medusa"),
                                "lookup": LaneRow("compare", "Prompt lookup", "lookup")})


def lane_rows(compare: str = "none") -> tuple[LaneRow, ...]:
    """The lanes a request races, in panel order: baseline, the token-level lane when one was asked for, EAGLE-2."""
    row = TOKEN_LEVEL.get(compare)
    return (BASELINE, EAGLE) if row is None else (BASELINE, row, EAGLE)


def lane_title(compare: str) -> str:
    """The title of the token-level lane `compare` names ("" for none)."""
    row = TOKEN_LEVEL.get(compare)
    return row.title if row is not None else ""


def speedup(fast: RunStats, base: RunStats) -> float:
    """Tokens/s of `fast` over `base` (Spec-Bench's definition, docs/ARCHITECTURE.md §4); 0 when either is unknown."""
    return fast.tokens_per_s / base.tokens_per_s if fast.tokens_per_s and base.tokens_per_s else 0.0
