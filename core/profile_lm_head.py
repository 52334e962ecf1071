"""`python -m core.profile_lm_head`: why TargetModel.logits and the decoders compute what they do, measured.

Times the target's LM head (the largest matmul of a step for small-model, big-vocabulary targets like Gemma 3 270M:
262144 x 640) for 1 row (a plain decoding step) and for tree-sized row counts (a verify), as linear()'s h @ W^T,
as W @ h^T / torch.mv (what TargetModel.logits runs in bf16 on CPU), and the per-step reductions on its output
(argmax + isfinite().all() against one torch.max). Prints a markdown table of medians in ms.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


@torch.inference_mode()
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m core.profile_lm_head", description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="default gemma-3-270m")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--rows", default="1,2,16,26", help="comma list of row counts (tree sizes)")
    p.add_argument("--repeats", type=int, default=20)
    a = p.parse_args(argv)
    from core.models.target import load_target

    target, _ = load_target(a.model, dtype=a.dtype)
    w = target.lm_head_weight  # (V, H)
    print(f"LM head {tuple(w.shape)} {w.dtype} on {w.device}, {torch.get_num_threads()} threads; median of "
          f"{a.repeats} (ms)\n")
    print("| rows | h @ W^T (linear) | W @ h^T or mv | logits() | argmax + isfinite | torch.max |")
    print("|---|---|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    for m in (int(x) for x in a.rows.split(",")):
        h = torch.randn(m, w.shape[1], generator=gen).to(w.dtype)
        lin = median_ms(lambda: F.linear(h, w), a.repeats)
        flip = median_ms((lambda: torch.mv(w, h[0])) if m == 1 else (lambda: (w @ h.T).T), a.repeats)
        ours = median_ms(lambda: target.logits(h[0] if m == 1 else h), a.repeats)
        out = target.logits(h[0] if m == 1 else h)
        two = median_ms(lambda: (out.argmax(-1), bool(torch.isfinite(out).all())), a.repeats)
        one = median_ms(lambda: out.max(-1), a.repeats)
        print(f"| {m} | {lin:.1f} | {flip:.1f} | {ours:.1f} | {two:.1f} | {one:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
