"""Where an EAGLE-2 step's time goes on this machine: draft, verify and the rest per step, and the ops behind them.

Runs the model's default head (or --head) alone at one tree over a few MT-bench first turns (read at run time, chat
template when the tokenizer has one), after one warm-up prompt, and prints the per-step means the engine itself
records in its step events (draft = the head's commit and proposal passes; verify = the target's forward and LM
head). With --ops it also profiles one more prompt with torch.profiler and prints the ops that took the most time.
Run it alone on the machine; it needs the model's weights (offline presets included).

    python scripts/probes/profile_draft.py --questions ../shared/data/mt_bench_questions.jsonl --prompts 3 --ops

Results: README, "Faster drafting".
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", required=True, help="MT-bench style jsonl (turns); the first turn of each row")
    ap.add_argument("--prompts", type=int, default=3, help="prompts timed, after one warm-up prompt")
    ap.add_argument("--tree", default="16,6,8,0", help="total_tokens,depth,top_k,lookup[,stop_below]")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy; above it, sampled with --seed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None)
    ap.add_argument("--head", default=None, help="head folder (default: the model's shipped head)")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ops", action="store_true", help="also print torch.profiler's top ops over one more prompt")
    a = ap.parse_args(argv)

    import torch

    from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
    from core.pipeline import build_decoders
    from core.prompt import encode_prompt

    try:
        rows = [json.loads(line) for line in Path(a.questions).read_text().splitlines() if line.strip()]
        tree = TreeConfig.parse(a.tree)
        sampling = SamplingConfig(temperature=a.temperature, seed=a.seed)
    except (OSError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if len(rows) < a.prompts + 2:
        print(f"error: {a.questions} has {len(rows)} rows; --prompts {a.prompts} needs {a.prompts + 2}",
              file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    target, tok, _, eagle = build_decoders(model=a.model, head=a.head, dtype=a.dtype)
    prompts = [encode_prompt(tok, r["turns"][0]) for r in rows[: a.prompts + 2]]
    cfg = DecodeConfig(max_new_tokens=a.max_new_tokens, sampling=sampling, tree=tree)
    list(eagle.generate(prompts[0], cfg))  # warm-up
    steps, tokens, t0 = [], 0, time.perf_counter()
    for ids in prompts[1: a.prompts + 1]:
        for ev in eagle.generate(ids, cfg):
            if ev.step:  # verify steps; the prefill is not a draft step
                steps.append(ev)
                tokens += len(ev.new_token_ids)
    wall = time.perf_counter() - t0
    mean = lambda f: statistics.mean(f(e) for e in steps)  # noqa: E731
    draft, verify, step = mean(lambda e: e.draft_ms), mean(lambda e: e.verify_ms), mean(lambda e: e.step_ms)
    print(f"{target.name} {str(target.dtype).removeprefix('torch.')} tree {a.tree} T={a.temperature:g}: {len(steps)} steps, "
          f"tau {tokens / len(steps):.2f}, {tokens / wall:.1f} tok/s")
    print(f"per step: draft {draft:.2f} ms, verify {verify:.2f} ms, other {step - draft - verify:.2f} ms, "
          f"step {step:.2f} ms; draft passes {mean(lambda e: e.draft_forwards):.2f}")
    if a.ops:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            list(eagle.generate(prompts[a.prompts + 1], cfg))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    return 0


if __name__ == "__main__":
    sys.exit(main())
