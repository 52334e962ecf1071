"""Honest step timing: perf_counter around device work, with a CUDA synchronize before each reading."""
from __future__ import annotations

import time

import torch


def now(device: torch.device) -> float:
    """Seconds, after finishing queued device work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
