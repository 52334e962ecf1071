"""Interleaved A/B of one engine switch on the same loaded model: speed and tokens, nothing else changed.

The switches are choices start-up timing makes on its own (core/models/kernels.py), forced each way here so their effect
can be measured on this machine:

- `lazy-rows`: a tree verify computes LM-head rows as acceptance reads them, or all N at once (core/engine/tree_logits.py);
- `target-kernel`: the target's LM-head product (linear, vocab_major, onednn);
- `draft-kernel`: the draft head's product over its draft vocabulary;
- `body-route`: the row counts whose forwards (target and draft head) run their linear layers through oneDNN:
  `timed` (what start-up timing chose), `off` (none), `all` (every count);
- `packing`: oneDNN-packed weights (core/models/kernels.py PackedWeights) `on` as start-up chose them, or `off`: no packed
  copies, and every kernel and route choice timed again without them (the engine as it was before packing).

Each round runs every value over every prompt, the order of values reversed on odd rounds; it prints mean tokens/s,
draft and verify ms per step and τ for each (value, decoder), and whether every value produced the same tokens.
Run it alone on the machine.

    python scripts/ab_switch.py lazy-rows --values on,off --tree 16,6,8,0 --tree 2,1,8,10 --rounds 2
    python scripts/ab_switch.py target-kernel --values vocab_major,onednn --baseline --max-new-tokens 48
    python scripts/ab_switch.py body-route --values timed,off --baseline --tree 16,6,8,0 --tree 4,2,8,0
    python scripts/ab_switch.py packing --values on,off --baseline --dtype bf16 --tree 16,6,8,0 --tree 16,6,8,10

Results: docs/results-history.md, "LM-head kernels, timed three ways" and "The body's products through oneDNN".
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROMPTS = (
    "Explain how a hash map works and why lookups are fast on average.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Summarize: The city council met on Tuesday to discuss the new park. The council voted to approve the budget for "
    "the park, which will include a playground, walking trails and a pond. Construction will start in spring.",
)


TARGET_CHOICES = ("packed", "head_kernel", "lazy_rows", "onednn_rows")
DRAFTER_CHOICES = ("packed", "rows_packed", "head_kernel", "onednn_rows")


def unpacked_choices(target, drafter) -> dict[str, dict[str, object]]:
    """The target's and drafter's start-up choices as they come out with no packed weights at all: every timing
    run again on plain weights (the draft head's layers follow the target's body route, as before packing)."""
    from core.models import kernels

    none = kernels.PackedWeights()
    head = target.model.get_output_embeddings()
    saved = {k: getattr(target, k) for k in TARGET_CHOICES}
    target.packed, target.onednn_rows = none, frozenset()
    try:
        t = {"packed": none, "onednn_rows": target._time_body()}
        t["head_kernel"], t["lazy_rows"] = kernels.head_choice(head.weight, getattr(head, "bias", None))
    finally:
        for k, v in saved.items():
            setattr(target, k, v)
    shared = drafter.w_draft is target.lm_head_weight
    d = {"packed": none, "rows_packed": none, "onednn_rows": t["onednn_rows"],
         "head_kernel": t["head_kernel"] if shared else kernels.head_kernel(drafter.w_draft)}
    return {"target": t, "drafter": d}


def apply(switch: str, value: str, target, drafter, timed_rows: frozenset[int] = frozenset(),
          packing: dict[str, dict[str, dict[str, object]]] | None = None) -> None:
    """Force one switch to one value on the loaded target / drafter (`timed_rows`: start-up's body route;
    `packing`: {"on"|"off": {"target"|"drafter": choices}} for the packing switch)."""
    from core.models import kernels

    if switch == "packing":
        for obj, name in ((target, "target"), (drafter, "drafter")):
            for k, v in packing[value][name].items():
                setattr(obj, k, v)
    elif switch == "body-route":
        target.onednn_rows = {"timed": timed_rows, "off": frozenset(), "all": frozenset(kernels.BODY_ROWS)}[value]
    elif switch == "lazy-rows":
        target.lazy_rows = {"on": True, "off": False}[value]
    elif switch == "target-kernel":
        target.head_kernel = value
    elif switch == "draft-kernel":
        drafter.head_kernel = value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("switch", choices=("lazy-rows", "target-kernel", "draft-kernel", "body-route", "packing"))
    ap.add_argument("--values", required=True, help="comma-separated: on,off; kernel names; timed,off,all")
    ap.add_argument("--tree", action="append", default=None, help="total_tokens,depth,top_k,lookup[,stop_below] (repeatable)")
    ap.add_argument("--baseline", action="store_true", help="also time plain decoding")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", default=None)
    ap.add_argument("--head", default=None, help="head folder (default: the model's shipped head)")
    ap.add_argument("--dtype", default="fp32")
    a = ap.parse_args(argv)

    from core.models import kernels
    from core.engine.baseline import BaselineDecoder
    from core.engine.config import DecodeConfig, TreeConfig
    from core.engine.eagle import Eagle2Decoder
    from core.drafters.heads import load_any_head, make_drafter
    from core.models.target import load_target
    from core.pipeline import default_head

    values = a.values.split(",")
    allowed = {"lazy-rows": ("on", "off"), "body-route": ("timed", "off", "all"),
               "packing": ("on", "off")}.get(a.switch, kernels.HEAD_KERNELS)
    if not set(values) <= set(allowed):
        print(f"error: {a.switch} takes {', '.join(allowed)}", file=sys.stderr)
        return 2
    head = a.head or default_head(a.model)
    if head is None:
        print("error: no head for this model: pass --head", file=sys.stderr)
        return 2
    target, tok = load_target(a.model, dtype=a.dtype)
    drafter = make_drafter(load_any_head(head), target)
    print(f"timed at start-up: target {target.head_kernel} (rows on demand: {target.lazy_rows}), "
          f"draft {drafter.head_kernel}, body through oneDNN at rows {sorted(target.onednn_rows)}", flush=True)
    timed_rows = target.onednn_rows
    packing = None
    if a.switch == "packing":
        packing = {"on": {"target": {k: getattr(target, k) for k in TARGET_CHOICES},
                          "drafter": {k: getattr(drafter, k) for k in DRAFTER_CHOICES}},
                   "off": unpacked_choices(target, drafter)}
        print(f"packed: {len(target.packed)} target weights, {len(drafter.packed)} draft weights; without packing: "
              f"target {packing['off']['target']['head_kernel']}, draft {packing['off']['drafter']['head_kernel']}, "
              f"body through oneDNN at rows {sorted(packing['off']['target']['onednn_rows'])}", flush=True)
    lanes = {}
    for spec in a.tree or ["16,6,8,0"]:
        lanes[f"eagle2 {spec}"] = (Eagle2Decoder(target, drafter), TreeConfig.parse(spec))
    if a.baseline:
        lanes["baseline"] = (BaselineDecoder(target), TreeConfig())
    prompts = [tok(p)["input_ids"] for p in PROMPTS[: a.prompts]]
    for dec, tree in lanes.values():  # warm-up
        list(dec.generate(prompts[0], DecodeConfig(max_new_tokens=8, tree=tree)))
    rows: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
    outputs: dict[tuple[str, int], set[tuple[int, ...]]] = {}
    for r in range(a.rounds):
        for value in (values if r % 2 == 0 else values[::-1]):
            apply(a.switch, value, target, drafter, timed_rows, packing)
            for name, (dec, tree) in lanes.items():
                for i, ids in enumerate(prompts):
                    t0 = time.perf_counter()
                    events = list(dec.generate(ids, DecodeConfig(max_new_tokens=a.max_new_tokens, tree=tree)))
                    dt = time.perf_counter() - t0
                    toks = tuple(t for e in events for t in e.new_token_ids)
                    outputs.setdefault((name, i), set()).add(toks)
                    steps = events[1:] or events
                    rows.setdefault((name, value), []).append((
                        len(toks) / dt, statistics.mean(e.draft_ms for e in steps),
                        statistics.mean(e.verify_ms for e in steps), len(toks) / len(events)))
    for (name, value), rs in rows.items():
        tps, draft, verify, tau = (statistics.mean(x[j] for x in rs) for j in range(4))
        print(f"{name:24s} {a.switch}={value:12s} tok/s {tps:6.2f}  draft ms {draft:6.1f}  verify ms {verify:6.1f}  "
              f"tau {tau:.2f}")
    same = all(len(v) == 1 for v in outputs.values())
    print("identical outputs across values:", same)
    return 0


if __name__ == "__main__":
    sys.exit(main())
