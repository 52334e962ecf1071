"""The race and its plumbing: two or three decoders interleaved by compute time on one device, out-of-memory
detection and the per-request log line (ZeroGPU's reservations are app/zerogpu.py's).

Both (or all three) generators run in one thread, one step at a time, always advancing whichever lane has used
the least compute time so far (sum of StepEvent.step_ms, measured inside core). At any moment every panel shows
what its method produced in the same compute time, so each grows at its true speed and UI work never enters a
measurement.
"""
import json
import logging
from typing import Iterator

from core.engine.events import StepEvent, summarize

log = logging.getLogger("eagle_playground.requests")


OOM_TEXT = ("out of memory", "can't allocate memory", "not enough memory", "failed to allocate memory")


def is_oom(e: BaseException) -> bool:
    """MemoryError, torch's OutOfMemoryError (CUDA/MPS), or the plain RuntimeError torch raises when the CPU
    allocator fails ("DefaultCPUAllocator: can't allocate memory: you tried to allocate ..." / "not enough memory")."""
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if isinstance(e, MemoryError) or (oom is not None and isinstance(e, oom)):
        return True
    return isinstance(e, RuntimeError) and any(t in str(e).lower() for t in OOM_TEXT)


def log_rejected(endpoint: str, model: str, message: str) -> None:
    """One JSON line for a request refused at the input boundary (no traceback: the user's mistake, not a fault)."""
    log.info(json.dumps({"event": "request", "endpoint": endpoint, "model": model, "outcome": "rejected",
                         "error": message[:200]}, ensure_ascii=True))


def log_request(endpoint: str, record, seconds: float, outcome: str, error: str = "") -> None:
    """One JSON line per request: model, methods, token counts, time, tau, outcome; never the prompt text."""
    line = {"event": "request", "endpoint": endpoint, "model": record.model, "methods": list(record.lanes),
            "prompt_tokens": len(record.prompt_ids), "seconds": round(seconds, 4), "outcome": outcome}
    for side in record.lanes:
        st = summarize(record.steps(side))
        line[f"{side}_new_tokens"] = st.new_tokens
        line[f"{side}_tau"] = round(st.tau, 4)
    if record.compare_kind != "none":
        line["compare"] = record.compare_kind  # which token-level drafter ran in the "compare" lane
    if error:
        line["error"] = error
    log.info(json.dumps(line, ensure_ascii=True))


def race(gens: dict[str, Iterator[StepEvent]]) -> Iterator[tuple[str, StepEvent]]:
    """Interleave generators by compute time: next() the side with the smallest sum of step_ms (ties: dict order)."""
    spent = {k: 0.0 for k in gens}
    live = dict(gens)
    while live:
        side = min(live, key=lambda k: spent[k])
        ev = next(live[side], None)
        if ev is None:
            del live[side]
            continue
        spent[side] += ev.step_ms
        yield side, ev
        if ev.finished:
            del live[side]  # the caller closes every generator when the race ends or is closed
