"""Plain autoregressive decoding through the same target adapter, cache, dtype and sampling code as EAGLE-2.

One StepEvent per token. This is the reference EAGLE-2 must reproduce exactly (greedy) or in distribution (sampled).
"""
from __future__ import annotations

from typing import Callable, Iterator

import torch

from core.engine import kv_cache
from core.engine.config import DecodeConfig
from core.engine.contract import Target, bit_exact
from core.engine.events import StepEvent
from core.engine.sampling import margin_fields, new_generator, pick
from core.engine.timing import now


class BaselineDecoder:
    method = "baseline"
    note = ""  # nothing to say about plain decoding

    def __init__(self, target: Target):
        self.target = target

    @torch.inference_mode()
    def generate(
        self, prompt_ids: list[int], cfg: DecodeConfig, should_stop: Callable[[], bool] | None = None
    ) -> Iterator[StepEvent]:
        """Yield one event per generated token until EOS, max_new_tokens, or should_stop()."""
        tgt = self.target
        gen = new_generator(cfg.sampling.seed)  # CPU uniforms: the same seeded tokens on any device
        cache = tgt.new_cache()
        ids = torch.tensor([prompt_ids], device=tgt.device)  # (1, P)
        try:
            for step in range(cfg.max_new_tokens):
                t0 = now(tgt.device)
                hidden, _ = tgt.forward(ids, cache)
                logits = tgt.logits(hidden[0, -1])  # (V,)
                t1 = now(tgt.device)
                tok, top = pick(logits, cfg.sampling, gen)  # greedy: the margin this token won by (core/engine/exactness.py)
                t2 = now(tgt.device)
                done = (cfg.stop_on_eos and tok in tgt.eos_ids) or step + 1 == cfg.max_new_tokens
                yield StepEvent(step=step, method=self.method, new_token_ids=(tok,), verify_ms=(t1 - t0) * 1e3,
                                step_ms=(t2 - t0) * 1e3,
                                finished=done, bit_exact=bit_exact(tgt, 1), **margin_fields([top]))
                if done or (should_stop and should_stop()):
                    return
                ids = torch.tensor([[tok]], device=tgt.device)
        finally:
            kv_cache.free(cache)
