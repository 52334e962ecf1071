"""Pure logits -> probabilities processing (temperature, top-k, top-p) and sampling with an explicit generator.

Both decoders and the acceptance rule use exactly these functions, so "the target's distribution" means the same
thing everywhere (EAGLE#178: processors must match on both sides).

Randomness is device-independent: every decode call owns one CPU `torch.Generator` (`new_generator`), uniforms are
drawn from it on the CPU, and a token is picked by the inverse CDF of its probabilities accumulated in float64 on
the CPU. `torch.multinomial(cuda_probs, generator=cpu_generator)` raises, and CUDA's multinomial consumes its stream
differently from the CPU's, so this is what makes the same seed give the same tokens on CPU and CUDA (up to the
float rounding of the probabilities themselves).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from core.engine.config import DecodeError, SamplingConfig, check_finite


def new_generator(seed: int) -> torch.Generator:
    """The CPU generator one decode call owns (the same stream of uniforms whatever device the model is on)."""
    return torch.Generator(device="cpu").manual_seed(seed)


def uniform(generator: torch.Generator) -> float:
    """One U[0, 1) draw as a Python float, from a generator on any device."""
    return float(torch.rand((), generator=generator, device=generator.device, dtype=torch.float64).item())


def target_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """(..., V) logits -> (..., V) fp32 probabilities after temperature, top-k and top-p."""
    x = logits.float() / cfg.temperature
    if cfg.top_k and cfg.top_k < x.shape[-1]:
        kth = torch.topk(x, cfg.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_x, idx = torch.sort(x, dim=-1, descending=True)
        cum = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
        drop = cum - torch.softmax(sorted_x, dim=-1) >= cfg.top_p  # keep the smallest prefix reaching top_p
        sorted_x = sorted_x.masked_fill(drop, float("-inf"))
        x = torch.empty_like(x).scatter_(-1, idx, sorted_x)
    return torch.softmax(x, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """Draw one token id from a (V,) distribution on any device: the first id whose cumulative mass exceeds u * total
    for one uniform u from `generator`. Zero-probability ids are never drawn; the mass need not sum to exactly 1.

    Raises DecodeError when the probabilities are not finite or hold no mass (e.g. a temperature so small that the
    scaled logits overflow), so the request stops with a clear message instead of sampling from NaN.
    """
    cdf = probs.detach().to("cpu", torch.float64).cumsum(-1)  # one (V,) copy to the host per sampled token
    total = float(cdf[-1].item())
    if not math.isfinite(total) or total <= 0.0:
        raise DecodeError("sampling probabilities are not finite (temperature too small for this model?); "
                          "this request was stopped")
    x = torch.tensor([uniform(generator) * total], dtype=torch.float64)
    return int(torch.searchsorted(cdf, x, right=True).clamp_(max=cdf.numel() - 1).item())


class Peak(NamedTuple):
    """A logits row's greedy choice: the first maximal index, its logit, and its margin over the runner-up."""

    id: int
    logit: float  # NaN or inf when the row holds them (max propagates NaN)
    margin: float  # top-1 minus top-2 logit; 0.0 at an exact tie


PEAK_BLOCK = 512  # elements per block: 262,144 logits = 512 blocks of 512


def peak(row: torch.Tensor) -> Peak:
    """(V,) logits -> Peak, with argmax's rule (the first maximal index) and topk(2)'s margin, from block maxima.

    torch's max-with-index and topk kernels read a bf16 row at well under 1 GB/s on CPU, while amax is about ten
    times faster. So the row is cut into blocks of PEAK_BLOCK, one amax gives every block's maximum, and only the
    winning block (the first holding the maximum) is searched for the index and the runner-up, which is the larger
    of that block's second value and every other block's maximum. On the default model's 262k vocabulary in bf16
    that is about 0.4 ms a row against 1.9 ms for max + topk(2), strided rows included (tests/models/test_logits.py pins the
    equality). The result is exactly theirs: NaN propagates through amax into `logit`, so callers check it.
    """
    row = row.contiguous()  # (V,): vocabulary-major logits arrive as strided rows
    v = row.shape[0]
    pad = -v % PEAK_BLOCK
    if pad:
        row = torch.cat([row, row.new_full((pad,), float("-inf"))])
    blocks = row.view(-1, PEAK_BLOCK)  # (V / B, B)
    best = blocks.amax(dim=1)  # (V / B,)
    j = int(best.argmax())  # the first block holding the maximum (NaN counts as the maximum)
    first = j * PEAK_BLOCK + int(blocks[j].argmax())  # argmax inside the block keeps the first-index rule
    second = blocks[j].topk(2).values[1]  # the runner-up inside the winning block (padding: -inf) ...
    others = torch.cat([best[:j], best[j + 1:]])
    if others.numel():
        second = torch.maximum(second, others.amax())  # ... or the best of any other block
    return Peak(first, float(best[j]), float(best[j].float() - second.float()))


def pick(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator) -> tuple[int, Peak | None]:
    """The next token and, when greedy, the row's Peak (its margin explains where two greedy runs part ways,
    core/engine/exactness.py). logits: (V,)

    Greedy takes the Peak's id (argmax's rule). Sampled draws from the processed distribution and returns no Peak:
    two sampled runs are not compared token by token, and a Peak would cost a pass over the row per token. Raises
    DecodeError on NaN / inf logits: the maximum (the Peak's, or one amax when sampled) reaches them.
    """
    if not cfg.greedy:
        return sample(target_probs(finite(logits), cfg), generator), None
    top = peak(logits)
    check_finite("target logits", [top.logit])  # NaN / +inf anywhere reaches the max
    return top.id, top


def margin_fields(tops: list[Peak | None]) -> dict[str, tuple[float, ...]]:
    """StepEvent's `margins` and `top_logits` from the Peaks that chose a step's tokens: one each per token when
    greedy, empty when sampled (pick() returns no Peak then)."""
    kept = [t for t in tops if t is not None]
    return {"margins": tuple(t.margin for t in kept), "top_logits": tuple(t.logit for t in kept)}


def finite(logits: torch.Tensor) -> torch.Tensor:
    """logits, after one amax has checked them for NaN / +inf (DecodeError); -inf entries (masked tokens) pass."""
    check_finite("target logits", [float(logits.amax())])
    return logits


def next_token(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator) -> int:
    """pick() without the Peak. logits: (V,)"""
    return pick(logits, cfg, generator)[0]
