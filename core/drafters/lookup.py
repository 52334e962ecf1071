"""The lookup drafter: no head at all, only the context-lookup chain the loop grafts (prompt lookup decoding
through the same loop, verification and statistics as the trained drafters)."""
from __future__ import annotations

import torch

from core.engine.config import TreeConfig


class LookupDrafter:
    """No head: the step's only guesses are the context-lookup chain the loop grafts (core/engine/lookup.py), i.e.
    prompt lookup decoding inside our engine. Token-level and free: nothing to commit, nothing to grow."""

    kind = "lookup"
    trained = True  # nothing to train: its guesses are copies of the context, not an untrained network's
    output_layers: tuple[int, ...] = ()

    def start(self) -> None:
        return None

    def commit(self, state: None, features: torch.Tensor, next_ids: torch.Tensor) -> int:
        return 0

    def propose(self, state: None, root_token: int, tree: TreeConfig) -> None:
        return None
