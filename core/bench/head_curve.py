"""τ against training data from heads' training cards: one row per head or snapshot, with what it cost.

Each head folder (or training run) keeps `training.json` with the data it saw, its training seconds, and the card
(τ of the head alone on a fixed sample at T=0 and T=1, plus τ at T=0 of every snapshot of the run). A fine-tuned
head's card nests the card of the head it started from (`init_card`), so the tokens and seconds of every earlier
round add up along that chain. `python -m core.train.evaluate --json` results can stand in for a card's own
evaluation (`--eval HEAD=FILE`), to put an old head on the same card, machine and dtype as a new run.

    python -m core.bench.head_curve runs/q5-ft/head runs/q5-eagle/head runs/q5-eagle3/head \
        --eval runs/old-heads/r1=runs/card_r1.json --json results/heads/qwen_r5_curve.json

Prints a markdown table; --json writes the rows.
"""
from __future__ import annotations

import json
from pathlib import Path

from core.bench.jsonfile import read_json, write_json
from core.cli import Parser, fail


def chain(card: dict) -> list[dict]:
    """The card and the cards of the heads it was fine-tuned from, oldest first."""
    out = []
    while card:
        out.append(card)
        card = card.get("init_card") or {}
    return out[::-1]


def data_tokens(card: dict) -> tuple[int, int]:
    """(tokens, generated) this one run trained on: its own shards plus --extra-shards."""
    d = card.get("data", {})
    tokens = d.get("stored", {}).get("tokens", 0) + sum(v.get("tokens", 0) for v in d.get("extra_stored", {}).values())
    gen = d.get("stored", {}).get("generated", 0) + sum(v.get("generated", 0) for v in d.get("extra_stored", {}).values())
    if not tokens:  # the first cards kept only the training count
        tokens = card.get("training", {}).get("tokens", 0)
    return tokens, gen


def tau(results: list[dict], temperature: float) -> float | None:
    r = next((r for r in results if r.get("temperature") == temperature), None)
    return round(r["tau"], 3) if r else None


def rows_for(head: Path, evaluation: dict | None) -> list[dict]:
    """The head's own row (its card, or `evaluation` in its place) and one row per snapshot of its run."""
    card = json.loads((head / "training.json").read_text())
    before = chain(card)[:-1]
    tokens_before = sum(data_tokens(c)[0] for c in before)
    gen_before = sum(data_tokens(c)[1] for c in before)
    secs_before = sum(c.get("training", {}).get("train_seconds", 0) for c in before)
    tokens, gen = data_tokens(card)
    t = card.get("training", {})
    hw = card.get("hardware", {})
    results = (evaluation or card.get("evaluation", {})).get("results", [])
    base = {"head": str(head), "type": card.get("head_type", "eagle"), "layers": t.get("layers"),
            "cpu": (evaluation or {}).get("cpu") or hw.get("cpu"), "rounds": len(before) + 1}
    rows = []
    for point in t.get("curve", []):
        frac = point["step"] / max(1, t.get("steps", 1))
        rows.append({**base, "head": f"{head} @ step {point['step']}", "tokens_seen": tokens_before + point["tokens_seen"],
                     "generated_seen": gen_before + round(gen * frac),
                     "train_seconds": round(secs_before + t.get("train_seconds", 0) * frac),
                     "tau_t0": round(point["tau_t0"], 3), "tau_t1": None})
    rows.append({**base, "tokens_seen": tokens_before + tokens,  # data the head descends from, not epochs x data
                 "generated_seen": gen_before + gen,
                 "train_seconds": round(secs_before + t.get("train_seconds", 0)),
                 "tau_t0": tau(results, 0.0), "tau_t1": tau(results, 1.0)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m core.bench.head_curve", description=__doc__.split("\n")[0])
    p.add_argument("heads", nargs="+", type=Path, help="head folders holding training.json")
    p.add_argument("--eval", action="append", default=[], metavar="HEAD=FILE",
                   help="a core.train.evaluate --json result that replaces HEAD's own card evaluation")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    try:
        evals = {}
        for item in a.eval:
            head, _, file = item.partition("=")
            if not file:
                raise ValueError(f"--eval wants HEAD=FILE, got {item!r}")
            evals[str(Path(head))] = read_json(file)
        rows = [r for h in a.heads for r in rows_for(h, evals.get(str(h)))]
    except (OSError, ValueError, KeyError) as e:
        return fail("[head_curve]", e)  # one line, status 2 (core/cli.py)
    print("| head | type | tokens seen (generated) | training s, all rounds | τ T=0 | τ T=1 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        t1 = f"{r['tau_t1']:.2f}" if r["tau_t1"] is not None else "–"
        t0 = f"{r['tau_t0']:.2f}" if r["tau_t0"] is not None else "–"
        print(f"| {r['head']} | {r['type']} | {r['tokens_seen'] / 1e6:.2f}M ({r['generated_seen'] / 1e6:.2f}M) "
              f"| {r['train_seconds']} | {t0} | {t1} |")
    if a.json:
        write_json(a.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
