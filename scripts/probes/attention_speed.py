"""The cost of the row-invariant attention: baseline and EAGLE-2 tokens/s, and per-step ms by context length, with
the invariant attention against SDPA on one loaded model (docs/trust.md, "Bit-exact mode"). Run it alone on the
machine (timings on a shared CPU say little):

    PYTHONPATH=. python scripts/probes/attention_speed.py --json results/kernels/attention_speed.json
    PYTHONPATH=. python scripts/probes/attention_speed.py --model gemma-3-270m --contexts 64,512,2048 --new-tokens 64

Per context length C (a prompt of C tokens) and attention (the order alternates between lengths so drift hits both):
one greedy baseline run and one EAGLE-2 run of --new-tokens tokens (tokens/s and mean ms per decode step, the
best of --repeats), and the forwards alone after a C-token cache: a one-token step and a --verify-rows tree verify
(fastest of 5 each). The model loads once; the probe runs once (its answer is reused for the other lengths).
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from core import pipeline
from core.engine import kv_cache, tree
from core.engine.config import DecodeConfig, TreeConfig
from core.engine.events import summarize
from core.models import kernels

MODES = ("sdpa", "invariant")


def context_ids(tok, length: int) -> list[int]:
    """A prompt of exactly `length` tokens of varied text (numbered notes, no verbatim repeats to copy)."""
    text = " ".join(f"Note {i}: item {i} weighs {i * 37 % 101} grams and costs {i * 53 % 97} cents."
                    for i in range(4000))
    ids = tok(text, add_special_tokens=False)["input_ids"][: length - 8]
    return ids + tok(" Summarise the notes above.", add_special_tokens=False)["input_ids"][:8]


def forward_ms(target, ids: list[int], rows: int, rounds: int = 5) -> tuple[float, float]:
    """(one-token step ms, `rows`-row tree verify ms) after a cache of `ids`, fastest of `rounds` each."""
    cache = target.new_cache()
    target.forward(torch.tensor([ids]), cache)
    parents = [-1] + [max(0, (i - 1) // 2) for i in range(1, rows)]
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for k, args in enumerate(((torch.tensor([[ids[-1]]]),),
                                  (torch.tensor([ids[:rows]]), parents, tree.depths(parents),
                                   tree.ancestor_mask(parents)))):
            t0 = time.perf_counter()
            target.forward(args[0], cache, *args[1:])
            best[k] = min(best[k], (time.perf_counter() - t0) * 1e3)
            kv_cache.crop(cache, len(ids))
    kv_cache.free(cache)
    return best[0], best[1]


def lane(decoder, ids: list[int], cfg: DecodeConfig, repeats: int) -> dict:
    """Best tokens/s of `repeats` runs, with that run's mean decode-step ms and tau."""
    runs = []
    for _ in range(repeats):
        events = list(decoder.generate(ids, cfg))
        st = summarize(events)
        decode = [e.step_ms for e in events if e.step > 0]
        runs.append({"tokens_per_s": st.tokens_per_s, "step_ms": sum(decode) / max(len(decode), 1), "tau": st.tau,
                     "bit_exact": st.bit_exact, "tokens": [t for e in events for t in e.new_token_ids]})
    return max(runs, key=lambda r: r["tokens_per_s"])


def measure(args: argparse.Namespace) -> dict:
    target, tok, base, eagle = pipeline.build_decoders(args.model, args.head, "cpu", args.dtype, attention="sdpa")
    rows = None
    cfg = DecodeConfig(max_new_tokens=args.new_tokens, tree=TreeConfig.parse(args.tree))
    out = {"cpu": kernels.cpu_description(), "threads": torch.get_num_threads(), "model": target.name,
           "dtype": str(target.dtype), "tree": args.tree, "new_tokens": args.new_tokens, "rows": []}
    for i, length in enumerate(int(c) for c in args.contexts.split(",")):
        ids = context_ids(tok, length)
        for mode in (MODES if i % 2 == 0 else MODES[::-1]):
            target.use_attention(mode, pinned_rows=rows if mode == "invariant" else None)
            rows = target.exact_rows if mode == "invariant" else rows
            step, verify = forward_ms(target, ids, args.verify_rows)
            b, e = lane(base, ids, cfg, args.repeats), lane(eagle, ids, cfg, args.repeats)
            out["rows"].append({"context": len(ids), "attention": target.attention, "exact_rows": target.exact_rows,
                                "step_ms": step, "verify_ms": verify, "baseline": b, "eagle2": e,
                                "identical": b.pop("tokens") == e.pop("tokens")})
            print(table_row(out["rows"][-1], args.verify_rows), flush=True)
    return out


def table_row(r: dict, rows: int) -> str:
    b, e = r["baseline"], r["eagle2"]
    return (f"| {r['context']} | {r['attention']} | {r['step_ms']:.1f} | {r['verify_ms']:.1f} ({rows} rows) | "
            f"{b['tokens_per_s']:.2f} | {b['step_ms']:.1f} | {e['tokens_per_s']:.2f} | {e['step_ms']:.1f} | "
            f"{e['tau']:.2f} | {r['identical']} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--head", default=None)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--contexts", default="64,256,1024,2048", help="prompt lengths in tokens")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--tree", default="16,6,8,10")
    p.add_argument("--verify-rows", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    print("| context | attention | step ms | verify ms | baseline tok/s | baseline ms/step | EAGLE-2 tok/s | "
          "EAGLE-2 ms/step | tau | identical |\n|---|---|---|---|---|---|---|---|---|---|", flush=True)
    out = measure(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
