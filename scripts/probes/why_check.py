"""Does the "why this speedup" arithmetic predict the measured speedup? Ten held-out prompts on one preset.

For each prompt: plain decoding and EAGLE-2 (the preset's head and tree), greedy, back to back in alternating order;
then app/why.py's `explain` on the run's own events: predicted = τ × plain step / drafting step, beside the measured
tokens/s ratio, and the same arithmetic with the plain step and the verify read off the verify profile measured once
before the prompts (core.engine.autotree.verify_profile, as the app does at start-up) instead of the run. The prompts are
written for this check (instructions of everyday kinds), not taken from any training or benchmark set.

    python -m scripts.probes.why_check --model smollm2-135m-instruct --max-new-tokens 64 --out results/bench/why_smollm2.json

Prints one markdown table (docs/playground.md, "Why this speedup: predicted against measured").
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


PROMPTS = (
    "Write three tips for keeping a houseplant alive.",
    "Explain what a rainbow is to a ten-year-old.",
    "List five things to pack for a weekend hiking trip.",
    "Write a short thank-you note to a neighbour who watered my garden.",
    "What is the difference between a lake and a pond?",
    "Give me a simple recipe for pancakes.",
    "Describe a busy train station in the morning.",
    "Why do cats purr? Answer in two sentences.",
    "Suggest a name for a small bakery and explain why.",
    "Summarise the rules of tic-tac-toe.",
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--prompts", type=int, default=len(PROMPTS), help="the first N prompts")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    a = p.parse_args(argv)

    import torch

    from app.why import explain
    from core.engine.autotree import interpolate
    from core.engine.autotree import verify_profile
    from core.engine.config import DecodeConfig
    from core.engine.events import summarize
    from core.pipeline import build_decoders
    from core.prompt import encode_prompt
    from core.models.presets import get_preset

    torch.set_num_threads(1)
    target, tok, baseline, eagle = build_decoders(a.model)
    preset = get_preset(a.model)
    tree = preset.tree if preset else DecodeConfig().tree
    cfg = DecodeConfig(max_new_tokens=a.max_new_tokens, tree=tree)
    profile = verify_profile(target, rounds=3)
    warm = encode_prompt(tok, "Hello there.", "auto")
    for dec in (baseline, eagle):
        list(dec.generate(warm, DecodeConfig(max_new_tokens=8, tree=tree)))
    rows = []
    for i, text in enumerate(PROMPTS[:a.prompts]):
        ids = encode_prompt(tok, text, "auto")
        events = {}
        for dec in ((baseline, eagle) if i % 2 == 0 else (eagle, baseline)):
            events[dec.method] = list(dec.generate(ids, cfg))
        b, e = summarize(events["baseline"]), summarize(events["eagle2"])
        w = explain("EAGLE-2", b, e, events["eagle2"], profile)
        rows.append({"prompt": text, "tau": w.tau, "plain_ms": w.plain_ms, "draft_ms": w.draft_ms,
                     "verify_ms": w.verify_ms, "other_ms": w.other_ms, "tree_size": w.tree_size,
                     "predicted": w.predicted, "measured": w.measured, "new_tokens": e.new_tokens,
                     # the same arithmetic with both forward costs read off the start-up profile instead of the run
                     "from_profile": w.tau * profile[1]
                     / (w.draft_ms + interpolate(profile, w.tree_size) + w.other_ms)})
        print(f"[why_check] {i + 1}/{a.prompts} tau {w.tau:.2f}, plain step {w.plain_ms:.1f} ms, drafting step "
              f"{w.step_ms:.1f} ms: predicted {w.predicted:.2f}x, measured {w.measured:.2f}x", file=sys.stderr,
              flush=True)
    print(f"{a.model}, tree {tree.total_tokens}/{tree.depth}/{tree.top_k} lookup {tree.lookup}, greedy, "
          f"{a.max_new_tokens} new tokens, {time.strftime('%Y-%m-%d')}\n")
    print("| # | prompt | τ | plain step ms | draft ms | verify ms | other ms | predicted | from profile | measured |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(rows, 1):
        print(f"| {i} | {r['prompt']} | {r['tau']:.2f} | {r['plain_ms']:.1f} | {r['draft_ms']:.1f} | "
              f"{r['verify_ms']:.1f} | {r['other_ms']:.1f} | {r['predicted']:.2f}× | {r['from_profile']:.2f}× | "
              f"{r['measured']:.2f}× |")
    err = [abs(r["predicted"] - r["measured"]) / r["measured"] for r in rows if r["measured"]]
    far = [abs(r["from_profile"] - r["measured"]) / r["measured"] for r in rows if r["measured"]]
    print(f"\nmean |predicted - measured| / measured: {sum(err) / len(err):.1%} (from the profile: "
          f"{sum(far) / len(far):.1%}); "
          f"verify profile (ms by tree size): {({n: round(v, 1) for n, v in profile.items()})}")
    if a.out:
        Path(a.out).write_text(json.dumps({"model": a.model, "rows": rows, "profile": profile}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
