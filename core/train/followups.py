"""Second-turn training data: the target's own first answer, a follow-up user turn, and the target's second answer.

A chat model's second answer reads its first one (MT-bench's second turns ask to rewrite, extend or fix it), so a
draft head needs data whose context holds the model's own earlier answer. This stage takes a finished round of
first turns (a core.train run's shards, prompts wrapped in the chat template) and the prompt file they came from,
and builds conversations in the same template:

    [user: prompt, assistant: the target's first answer (decoded from the stored ids), user: follow-up]

The follow-up is the row's own first `followups` entry when the prompt file has one (prompts2.jsonl: 124
conversations), else, for a `generic_share` of the rows, one of FOLLOWUPS: requests a person makes of an answer
they just read. The target then answers with `shards.build_shards` like any first turn, so the shards (and their
packed token ids, core/train/tokens.py) have the usual layout; the conversation prompt is the stored prefix.

    python -m core.train.followups --model M --prompts P --first-turns runs/R/shards --out runs/R2
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from core.cli import Parser, fail
from core.train.data import user_turn
from core.train.tokens import read_shard_ids

FOLLOWUPS = (
    "Can you make that shorter?",
    "Explain that in more detail.",
    "Can you give an example?",
    "Rewrite your answer as a bulleted list.",
    "Why is that? Explain your reasoning step by step.",
    "Summarize your answer in one sentence.",
    "Rewrite it in a more formal tone.",
    "What are the main caveats or limitations?",
    "Can you write that for a ten-year-old?",
    "Are you sure? Please double-check your answer.",
    "Now give me the same answer in a table.",
    "Thanks! What would you suggest as a next step?",
)


def conversations(tok, pool: list[dict], first_turns: list[Path], generic_share: float, seed: int,
                  max_prompt: int) -> tuple[list[dict], dict]:
    """Second-turn prompt rows {kind: 'prompt', id, body (templated text)} and counts of what was built.

    pool: the prompt file's rows ({id, prompt, optional followups}). A stored first turn is matched to its row by
    its prompt's token ids (the same encoding core.train --chat made). Conversations longer than `max_prompt`
    tokens are left out rather than cut (a cut would remove the turn the target must answer).
    """
    by_ids = {tuple(tok(user_turn(tok, r["prompt"]), add_special_tokens=True).input_ids): r for r in pool}
    rng = random.Random(seed)
    rows, counts = [], {"first_turns": 0, "own_followups": 0, "generic_followups": 0, "too_long": 0}
    for path in first_turns:
        for shard in sorted(Path(path).glob("shard_*.safetensors")):
            seqs, gen = read_shard_ids(shard)
            for ids, g in zip(seqs, gen):
                counts["first_turns"] += 1
                row = by_ids.get(tuple(ids[: len(ids) - g]))
                if row is None or not g:
                    continue
                own = row.get("followups") or []
                if own:
                    follow, kind = own[0], "own_followups"
                elif rng.random() < generic_share:
                    follow, kind = rng.choice(FOLLOWUPS), "generic_followups"
                else:
                    continue
                answer = tok.decode(ids[len(ids) - g :], skip_special_tokens=True).strip()
                body = tok.apply_chat_template(
                    [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": answer},
                     {"role": "user", "content": follow}], tokenize=False, add_generation_prompt=True)
                if len(tok(body, add_special_tokens=True).input_ids) > max_prompt:
                    counts["too_long"] += 1
                    continue
                counts[kind] += 1
                rows.append({"kind": "prompt", "id": f"{row.get('id', '?')}#2", "body": body})
    return rows, counts


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m core.train.followups", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompts", required=True, type=Path, help="the prompt file the first turns came from")
    p.add_argument("--first-turns", required=True, action="append", type=Path, metavar="DIR",
                   help="a core.train --chat run's shards (repeatable)")
    p.add_argument("--out", required=True, type=Path, help="run folder; shards go to OUT/shards")
    p.add_argument("--generic-share", type=float, default=0.25,
                   help="share of rows without their own follow-up that get a generic one")
    p.add_argument("--batch", type=int, default=48)
    p.add_argument("--max-prompt", type=int, default=896)
    p.add_argument("--new-tokens", type=int, default=192)
    p.add_argument("--sample-share", type=float, default=0.5)
    p.add_argument("--max-shards", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto")
    a = p.parse_args(argv)
    try:
        if not 0.0 <= a.generic_share <= 1.0:
            raise ValueError("--generic-share must be between 0 and 1")
        from core.models.target import load_target
        from core.train.shards import build_shards

        target, tok = load_target(a.model, dtype=a.dtype)
        if not tok.chat_template:
            raise ValueError(f"{a.model} has no chat template; second turns need one")
        pool = [json.loads(line) for line in open(a.prompts, encoding="utf-8") if line.strip()]
        rows, counts = conversations(tok, pool, a.first_turns, a.generic_share, a.seed, a.max_prompt)
        if not rows:
            raise ValueError(f"no second turn to write ({counts}): first turns from another prompt file, not --chat "
                             "shards, or every conversation over --max-prompt")
        a.out.mkdir(parents=True, exist_ok=True)
        stats = build_shards(target, tok, rows, a.out / "shards", a.batch, a.max_prompt, a.new_tokens, 0,
                             a.sample_share, a.seed, max_shards=a.max_shards)
        print(json.dumps({"conversations": counts, "data": stats}, indent=1))
    except (OSError, ValueError) as e:
        return fail("[core.train.followups]", e)  # one line, status 2 (core/cli.py)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
