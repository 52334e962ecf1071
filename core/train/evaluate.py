"""Acceptance measurements for a trained head: tau under the EAGLE-2 tree, and chain acceptance n-alpha.

n-alpha (arXiv 2401.15077 §4.3.2): with a chain draft (top_k 1), the acceptance rate of the draft token at depth
n + 1 given that depth n was accepted, i.e. with n self-predicted features in the head's input.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
from core.engine.eagle import Eagle2Decoder
from core.engine.events import summarize
from core.models.target import TargetModel
from core.prompt import encode_prompt

SPEC_BENCH_GROUPS = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}


def spec_bench_category(cat: str) -> str:
    """Spec-Bench's six categories: MT-bench's eight collapse into 'mt_bench'."""
    return "mt_bench" if cat in SPEC_BENCH_GROUPS else cat


def sample_questions(path: str, per_category: int) -> list[dict]:
    """A fixed sample: the first `per_category` rows of each Spec-Bench category, in file order."""
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    seen: dict[str, int] = {}
    out = []
    for r in rows:
        c = spec_bench_category(r["category"])
        if seen.get(c, 0) < per_category:
            seen[c] = seen.get(c, 0) + 1
            out.append({**r, "group": c})
    return out


def card_questions(folder: Path, spec_per_group: int = 3) -> list[dict]:
    """The chat head's card, 31 prompts never trained on and never in a published test split: MT-bench's dev-split
    first turns (2 in each of its 8 categories) and the first `spec_per_group` dev-split questions of each of
    Spec-Bench's five other groups (translation, summarization, qa, math_reasoning, rag)."""
    from core.splits import in_dev_split

    def rows(name: str) -> list[dict]:
        return [r for line in open(folder / name, encoding="utf-8") if line.strip()
                for r in [json.loads(line)] if in_dev_split(r["question_id"])]

    out = [{**r, "group": r["category"]} for r in rows("mt_bench_questions.jsonl")]
    seen: dict[str, int] = {}
    for r in rows("spec_bench_questions.jsonl"):
        c = spec_bench_category(r["category"])
        if c != "mt_bench" and seen.get(c, 0) < spec_per_group:
            seen[c] = seen.get(c, 0) + 1
            out.append({**r, "group": c})
    return out


def measure(target: TargetModel, tok, decoder: Eagle2Decoder, questions: list[dict], max_new: int,
            temperature: float, tree: TreeConfig, chain_depth: int = 5, prompt_mode: str = "raw") -> dict:
    """tau per category (tree) and per prompt with the median, the share of steps whose accepted path reached each
    depth (pooled over prompts), and chain n-alpha for n = 0..chain_depth-1. prompt_mode: 'raw' or 'chat' (one
    user turn of the tokenizer's template), as core.prompt.encode_prompt. `decoder`: core.pipeline.decoder_for's."""
    dec = decoder
    chain = TreeConfig(total_tokens=chain_depth + 1, depth=max(1, chain_depth), top_k=1, lookup=0)  # 0: no chain run
    per_cat: dict[str, list[tuple[int, int]]] = {}
    per_prompt: list[float] = []
    hist: list[int] = []
    reached = [0] * chain_depth
    accepted = [0] * chain_depth
    for q in questions:
        ids = encode_prompt(tok, q["turns"][0], prompt_mode)
        s = SamplingConfig(temperature=temperature, seed=q["question_id"])
        st = summarize(list(dec.generate(ids, DecodeConfig(max_new, s, tree))))
        per_cat.setdefault(q["group"], []).append((st.new_tokens, st.target_forwards))
        per_prompt.append(round(st.new_tokens / max(1, st.target_forwards), 4))
        for d, n in enumerate(st.accept_hist):  # steps that accepted exactly d drafts, summed over prompts
            hist += [0] * (d + 1 - len(hist))
            hist[d] += n
        for e in dec.generate(ids, DecodeConfig(max_new, s, chain)) if chain_depth else ():
            if not e.tree:
                continue
            a = e.accepted_drafts
            for n in range(chain_depth):
                if a >= n:
                    reached[n] += 1
                    accepted[n] += a >= n + 1
    tau = {c: sum(t for t, _ in v) / sum(f for _, f in v) for c, v in per_cat.items()}
    all_t = sum(t for v in per_cat.values() for t, _ in v)
    all_f = sum(f for v in per_cat.values() for _, f in v)
    steps = sum(hist)
    return {"temperature": temperature, "tree": tree.__dict__, "prompts": len(questions), "max_new_tokens": max_new,
            "tau": all_t / all_f, "tau_per_category": tau, "tau_per_prompt": per_prompt,
            "tau_median": statistics.median(per_prompt) if per_prompt else None,
            "depth_reached": [round(sum(hist[d:]) / steps, 4) for d in range(1, len(hist))] if steps else [],
            "chain_alpha": [accepted[n] / reached[n] if reached[n] else 0.0 for n in range(chain_depth)]}


def heldout(target: TargetModel, head_dir: str, shards: list[Path], ttt_steps: int = 2,
            max_len: int = 768) -> dict:
    """A saved EAGLE-1/2 or EAGLE-3 head's teacher-forced top-1 / top-3 per unrolled step on the answers of held-out
    shards, as a training run's held-out curve measures them (core.train.fit.heldout_measure): an old head, or a
    run that measured something else, put on the same scale in seconds instead of a decoding card's minutes."""
    import torch

    from core.drafters.eagle3_head import Eagle3Head
    from core.drafters.heads import load_any_head
    from core.models import kernels
    from core.train.shards import load_shards
    from core.train.fit import FitConfig, heldout_measure

    head = load_any_head(head_dir)
    eagle3 = isinstance(head, Eagle3Head)
    seqs = [sq for d in shards for sq in load_shards(Path(d), taps=eagle3)]
    w_full = w = target.lm_head_weight.detach().float()
    ids = getattr(head, "vocab_ids", None)
    in_vocab = None
    if ids is not None and len(ids) < w.shape[0]:
        in_vocab = torch.zeros(w.shape[0], dtype=torch.bool)
        in_vocab[ids] = True
        w = w[ids]
    rows = ids.long() if ids is not None else torch.arange(w_full.shape[0])  # the target id of each draft row
    cfg = FitConfig(ttt_steps=ttt_steps, max_len=max_len, noise=0.0)
    with torch.no_grad():
        r = heldout_measure(head, target.embed, w, seqs, cfg, 1.0, in_vocab, head.draft_logits if eagle3 else None,
                            kernels.bf16_matmul_is_faster(w.shape[1]), full=(w_full, rows))
    return {"head": str(head_dir), "shards": [str(d) for d in shards], "ttt_steps": ttt_steps, **r}


def baseline_text(target: TargetModel, tok, prompt: str, max_new: int) -> str:
    """Greedy reference continuation (for eyeballing a head's data)."""
    ids = tok(prompt).input_ids
    out = [t for e in BaselineDecoder(target).generate(ids, DecodeConfig(max_new)) for t in e.new_token_ids]
    return tok.decode(out)


def main(argv: list[str] | None = None) -> int:
    """`python -m core.train.evaluate`: tau per Spec-Bench category and chain n-alpha at T=0 and T=1, as JSON."""
    from core.cli import Parser, fail
    from core.models.kernels import cpu_description
    from core.pipeline import build_decoders

    p = Parser(prog="python -m core.train.evaluate", description=main.__doc__)
    p.add_argument("--questions", default=None, help="a questions file (Spec-Bench / MT-bench layout)")
    p.add_argument("--card", action="store_true", help="the chat head's 31-prompt card instead (card_questions: "
                   "MT-bench and Spec-Bench dev splits from the data folder, $EAGLE_DATA_DIR or ../shared/data)")
    p.add_argument("--per-category", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperatures", default="0,1")
    p.add_argument("--model", default=None)
    p.add_argument("--head", default=None)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--tree", default=None, help="T,D,K[,L] (default: the engine's default tree; the training "
                   "card's tree, the head alone, is 16,6,6,0)")
    p.add_argument("--chat", action="store_true", help="wrap each question in the model's chat template "
                   "(as a chat head's training card does)")
    p.add_argument("--heldout", action="append", default=[], metavar="DIR",
                   help="instead of decoding: teacher-forced top-1 / top-3 on the answers of these shards "
                        "(repeatable; the training run's held-out measure)")
    p.add_argument("--chain-depth", type=int, default=5, help="chain n-alpha up to this depth (0: skip the chain "
                   "decode, which doubles the time)")
    p.add_argument("--heldout-steps", type=int, default=2, help="unrolled steps of the held-out measure")
    p.add_argument("--json", default=None, help="also write the result here")
    a = p.parse_args(argv)
    try:
        if a.heldout:
            from core.models.target import load_target
            if not a.head:
                raise ValueError("--heldout measures a head: give --head FOLDER")
            target, _ = load_target(a.model, dtype=a.dtype)
            return _emit(heldout(target, a.head, [Path(d) for d in a.heldout], a.heldout_steps), a.json)
        if a.card:
            from core.paths import data_dir
            qs = card_questions(data_dir())
        elif a.questions:
            qs = sample_questions(a.questions, a.per_category)
        else:
            raise ValueError("give --questions FILE or --card")
        temps = [float(t) for t in a.temperatures.split(",")]
        tree = TreeConfig.parse(a.tree) if a.tree else TreeConfig()
        target, tok, _, eagle = build_decoders(a.model, a.head, None, a.dtype)
    except (ValueError, OSError) as e:
        return fail("", e)  # one line, status 2 (core/cli.py)
    mode = "chat" if a.chat and tok.chat_template else "raw"
    out = {"questions": "card" if a.card else a.questions, "per_category": None if a.card else a.per_category,
           "head": a.head, "tree": tree.spec(),
           "prompt_mode": mode, "dtype": str(target.dtype), "cpu": cpu_description(),
           "results": [measure(target, tok, eagle, qs, a.max_new_tokens, t, tree, a.chain_depth, mode)
                       for t in temps]}
    return _emit(out, a.json)


def _emit(out: dict, path: str | None) -> int:
    """Print the result as JSON and also write it to `path` when given."""
    text = json.dumps(out, indent=2)
    print(text)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
