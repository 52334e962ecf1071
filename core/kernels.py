"""Choices between code paths, made by timing them on this machine at start-up, never by a constant.

The processor under this project changes: an Intel Xeon with AMX (native bf16 matrix units) on some days, an AMD
EPYC with AVX2 only on others. What is fast on one can be several times slower on the other, so each choice here
times its candidates now, on synthetic tensors of the model's own shapes, alternating which goes first and keeping
each one's best time (a warm-up round included).

- `vocab_major_is_faster`: the LM head as W @ h^T (torch.mv for one row) or as linear()'s h @ W^T. Same values, so
  the choice cannot change a token beyond the rounding that already differs between row counts.
- `fastest_cpu_dtype`: bf16 or fp32 for a CPU model loaded without an explicit dtype. fp32 is the exact reference,
  so it is chosen whenever it is at least as fast; bf16 only where the processor makes it faster.
- `bf16_matmul_is_faster`: whether head training on CPU runs under bf16 autocast or in plain fp32.

Measured on an AMD EPYC with AVX2 only (2 threads, 2026-12-02; README "When the processor has no bf16 units"): a
16-row product with Gemma 3 270M's (262144, 640) head took 463 ms in bf16 and 124 ms in fp32 (vocabulary-major;
256 ms through linear()), one row 29 and 54 ms.
"""
from __future__ import annotations

import time
from typing import Callable

import torch
import torch.nn.functional as F

ROWS = (1, 16)  # a one-token step and a default tree verify (16 nodes)
HEAD_SLICE = 32768  # LM-head rows timed; the cost is scaled to the full vocabulary


def fastest(candidates: dict[object, Callable[[], object]], rounds: int = 5) -> dict[object, float]:
    """Best seconds of each zero-argument callable over `rounds` (the first a warm-up), order rotated per round."""
    keys = list(candidates)
    best = {k: float("inf") for k in keys}
    for r in range(rounds + 1):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            t0 = time.perf_counter()
            candidates[k]()
            if r:
                best[k] = min(best[k], time.perf_counter() - t0)
    return best


def _head_products(w: torch.Tensor, h: torch.Tensor) -> dict[bool, Callable[[], torch.Tensor]]:
    """w (V, H), h (M, H) -> {vocab-major?: the (M, V) product}; vocab-major is torch.mv for one row."""
    major = (lambda: torch.mv(w, h[0])) if len(h) == 1 else (lambda: w @ h.T)
    return {True: major, False: lambda: F.linear(h, w)}


def vocab_major_is_faster(w: torch.Tensor, rounds: int = 5) -> bool:
    """True when W @ h^T (torch.mv for one row) beats linear()'s h @ W^T for a (V, H) CPU head, over 1 and 8 rows.

    One decision covers both row counts, so a one-token step and a tree verify keep using the same orientation.
    """
    total = {True: 0.0, False: 0.0}
    for m in (1, 8):
        h = torch.randn(m, w.shape[1], dtype=w.dtype)
        for k, t in fastest(_head_products(w, h), rounds).items():
            total[k] += t
    return total[True] <= total[False]


def _step_seconds(dtype: torch.dtype, hidden: int, intermediate: int, vocab: int, body_params: int,
                  rounds: int) -> float:
    """Estimated seconds of one 1-row step plus one 16-row verify in `dtype`: an MLP-shaped product scaled to the
    body's parameter count, and an LM-head slice (its faster orientation) scaled to the vocabulary."""
    gen = torch.Generator().manual_seed(0)
    w_mlp = torch.randn(intermediate, hidden, generator=gen).to(dtype)  # (I, H)
    w_head = torch.randn(min(vocab, HEAD_SLICE), hidden, generator=gen).to(dtype)  # (V', H)
    total = 0.0
    for m in ROWS:
        h = torch.randn(m, hidden, generator=gen).to(dtype)
        mlp = fastest({0: lambda: F.linear(h, w_mlp)}, rounds)[0]
        head = min(fastest(_head_products(w_head, h), rounds).values())
        total += mlp * body_params / w_mlp.numel() + head * vocab / len(w_head)
    return total


def fastest_cpu_dtype(config, rounds: int = 3) -> tuple[torch.dtype, dict[str, float]]:
    """(bf16 or fp32, estimated ms per 1-row step + 16-row verify for each) for a text config on this CPU.

    fp32 wins ties: it is the exact reference, and it is what a processor without bf16 units runs fastest.
    """
    hidden, vocab = config.hidden_size, config.vocab_size
    intermediate = getattr(config, "intermediate_size", None) or 4 * hidden
    heads = getattr(config, "num_attention_heads", 1)
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    per_layer = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * intermediate  # q, o, k, v + gated MLP
    body = per_layer * config.num_hidden_layers
    ms = {name: 1e3 * _step_seconds(dt, hidden, intermediate, vocab, body, rounds)
          for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32))}
    return (torch.bfloat16 if ms["bf16"] < ms["fp32"] else torch.float32), ms


def bf16_matmul_is_faster(hidden: int, rows: int = 1024, cols: int = 8192, rounds: int = 2) -> bool:
    """True when a training-shaped product, (rows, hidden) x (hidden, cols), runs faster in bf16 than in fp32
    here: whether bf16 autocast speeds training up on this CPU (AMX) or slows it down (AVX2 only)."""
    gen = torch.Generator().manual_seed(0)
    a, w = torch.randn(rows, hidden, generator=gen), torch.randn(cols, hidden, generator=gen)
    a16, w16 = a.to(torch.bfloat16), w.to(torch.bfloat16)
    best = fastest({"bf16": lambda: F.linear(a16, w16), "fp32": lambda: F.linear(a, w)}, rounds)
    return best["bf16"] < best["fp32"]


def cpu_description() -> str:
    """'AMD EPYC · avx2' style: the processor's model name and its widest bf16-relevant feature (Linux; else '')."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        return ""
    name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "")
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    feature = next((f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in flags), "")
    return " · ".join(x for x in (name, feature) if x)
