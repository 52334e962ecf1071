"""A head's top-1 agreement with its target, teacher-forced on the target's own greedy continuations.

For each prompt the target writes --max-new-tokens greedily; one forward over prompt + continuation gives the real
features, and the head, reading every (feature f_i, token t_{i+1}) pair at once, predicts t_{i+2}. The share it gets
right on the continuation is what a decoding step's first draft level can reach (0-α of a chain), without any tree
or decoding in the way; the same number on the prompt tokens shows how the head reads text it did not write. A head
that scores well on its training pool and poorly here generalises poorly; one that scores well here but drafts
poorly in decoding points at the loop. EAGLE-1/2 heads (the head reads the last feature).

    python scripts/head_agreement.py --model smollm2-135m-instruct --head static/heads/smollm2-135m-instruct \
        --questions ../shared/data/mt_bench_questions.jsonl --n 10 --prompt-mode chat
    python scripts/head_agreement.py --head static/heads/gemma-3-270m --questions ../shared/data/train/prompts.jsonl \
        --n 8 --sample-seed 1 --prompt-mode raw

Results: README, "Heads for the offline presets".
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--head", required=True, help="an EAGLE-1/2 head folder")
    p.add_argument("--questions", required=True, help="JSONL rows with 'turns' (first turn used) or 'prompt'")
    p.add_argument("--model", default=None, help="target (default: the default model)")
    p.add_argument("--n", type=int, default=6, help="prompts (the first n rows, or n drawn with --sample-seed)")
    p.add_argument("--sample-seed", type=int, default=None,
                   help="draw the n rows at random with this seed (random.Random(seed).sample) instead")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--prompt-mode", default="auto", choices=("auto", "raw", "chat"))
    p.add_argument("--dtype", default="fp32")
    return p.parse_args(argv)


def prompt_text(row: dict) -> str | None:
    turns = row.get("turns")
    return turns[0] if turns else row.get("prompt")


def guesses(target, head, full):
    """full (1, S) token ids -> (S - 2,) the head's guess of t_{i+2} from the real pair (f_i, t_{i+1}), i = 0..S-3:
    one target forward for the features, one head pass over every pair."""
    import torch

    feat = target.decoder(input_ids=full).last_hidden_state  # (1, S, H) post-norm
    pred, _ = head(target.embed(full[:, 1:]), feat[:, :-1], torch.arange(full.shape[1] - 1))  # (1, S-1, H)
    w = target.lm_head_weight.detach()[head.vocab_ids]  # (Vd, H)
    return head.vocab_ids[(pred[0, :-1] @ w.T).argmax(-1)]


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    try:
        rows = [json.loads(line) for line in open(a.questions, encoding="utf-8") if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        print(f"error: cannot read {a.questions}: {e}", file=sys.stderr)
        return 2
    if a.sample_seed is not None:
        rows = random.Random(a.sample_seed).sample(rows, min(a.n, len(rows)))
    texts = [t for t in map(prompt_text, rows) if isinstance(t, str) and t.strip()][: a.n]
    if not texts:
        print(f"error: no prompts in {a.questions} (rows need 'turns' or 'prompt')", file=sys.stderr)
        return 2
    import torch

    from core.drafters.heads import kind_of, load_any_head
    from core.models.target import load_target
    from core.pipeline import encode_prompt

    target, tok = load_target(a.model, dtype=a.dtype)
    head = load_any_head(a.head).to(target.dtype).eval()
    if kind_of(head).name != "eagle":
        print(f"error: {a.head} is not an EAGLE-1/2 head", file=sys.stderr)
        return 2
    gen_hits = gen_n = prompt_hits = prompt_n = 0
    with torch.inference_mode():
        for text in texts:
            ids = torch.tensor([encode_prompt(tok, text, a.prompt_mode)])  # (1, P)
            full = target.model.generate(ids, max_new_tokens=a.max_new_tokens, do_sample=False)  # (1, S)
            hit = guesses(target, head, full) == full[0, 2:]  # (S-2,)
            first = max(ids.shape[1] - 2, 0)  # hit[k] judges token k + 2: the continuation starts at k = p - 2
            gen_hits += int(hit[first:].sum())
            gen_n += len(hit) - first
            prompt_hits += int(hit[:first].sum())
            prompt_n += first
            print(f"{int(hit[first:].sum())}/{len(hit) - first} continuation tokens: {text[:60]!r}", flush=True)
    print(f"top-1 agreement on the target's continuations: {gen_hits / max(gen_n, 1):.3f} ({gen_n} tokens); "
          f"on the prompts: {prompt_hits / max(prompt_n, 1):.3f} ({prompt_n} tokens)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
