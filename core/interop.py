"""Our heads in a serving engine: what vLLM's EAGLE drafters read, and the two halves of recipes/vllm.sh's check.

vLLM (0.32) serves an EAGLE-1/2 head with `EagleLlamaForCausalLM` (vllm/model_executor/models/llama_eagle.py):
`fc` is built without a bias and drafts over the target's full vocabulary (no d2t), and its weight loader refuses
any name it has no parameter for. An EAGLE-3 head goes to `Eagle3LlamaForCausalLM` (llama_eagle3.py), which maps
`d2t` to its draft-to-target table and skips `t2d`. `vllm_problems` reads a head folder (config and weight names,
no tensors) and says what would stop vLLM from loading it unedited.

    python -m core.interop check HEAD                         # vLLM-readable? one line per problem, exit 1 if any
    python -m core.interop export HEAD OUT --engine sglang    # the same head, written the way that engine reads it
    python -m core.interop compact HEAD                       # weights stored compact in place (int8 + xz)
    python -m core.interop expand HEAD                        # a compact folder's full layout written back
    python -m core.interop ours --model M --head H --out J    # our fp32 greedy run + the job for scripts/vllm_side.py
    python -m core.interop compare OURS.json VLLM.json        # last line: one JSON object (recipes/vllm.sh)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from core.cli import Parser, fail
from core.drafters import storage
from core.drafters.heads import vllm_problems  # the check `check` runs; it lives with the head rules
from core.paths import data_dir

DATA = data_dir()  # $EAGLE_DATA_DIR, else ../shared/data (core/paths.py)

def export(head_dir: str | Path, out_dir: str | Path, engine: str) -> None:
    """Rewrite an EAGLE-1/2 head folder for `engine` (core.drafters.draft_head.save_head), keeping its dtype and card."""
    import shutil

    import torch

    from core.drafters.draft_head import load_head, save_head
    from core.drafters.heads import kind_of_folder
    from core.drafters.storage import stored_dtype

    src, out = Path(head_dir), Path(out_dir)
    if kind_of_folder(src).name != "eagle":
        raise ValueError(f"{src} is not an EAGLE-1/2 head; EAGLE-3 heads load in both engines as written")
    if out.resolve() == src.resolve():
        raise ValueError("write the export to another folder")
    dtype = stored_dtype(src, "fc.weight")
    save_head(load_head(src), out, dtype=dtype if dtype in (torch.bfloat16, torch.float16) else torch.float32,
              engine=engine)
    for extra in ("training.json", "NOTICE", "GEMMA_TERMS.html"):
        if (src / extra).exists():
            shutil.copy(src / extra, out / extra)


def run_ours(model: str, head: str, questions: str, n: int, k: int, max_new: int) -> dict:
    """Greedy fp32 decoding of the first turns with a chain of k drafts per step (tree k+1,k,1, no lookup), EOS
    ignored so both engines write max_new tokens. Returns the job for scripts/vllm_side.py plus our results."""
    from core.bench.questions import read_questions
    from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
    from core.drafters.heads import kind_of_folder, load_any_head
    from core.models.target import load_target, resolve_model
    from core.pipeline import decoder_for
    from core.prompt import encode_prompt

    target, tok = load_target(model, dtype="fp32")
    loaded = load_any_head(head)
    if getattr(loaded, "inference_vocab", None) is not None:
        loaded.inference_vocab = None  # vLLM drafts over every row of the head's vocabulary: compare like for like
    decoder = decoder_for(loaded, target)
    rows = read_questions(questions)[:n]
    prompts = [encode_prompt(tok, r["turns"][0], "chat" if tok.chat_template else "raw") for r in rows]
    cfg = DecodeConfig(max_new_tokens=max_new, sampling=SamplingConfig(), tree=TreeConfig(k + 1, k, 1, 0),
                       stop_on_eos=False)
    outputs, margins, accepted = [], [], []
    for ids in prompts:
        out, marg = [], []
        for ev in decoder.generate(ids, cfg):
            out += ev.new_token_ids
            marg += ev.margins
            if ev.step:  # verify steps only (vLLM's counters start after the prefill)
                accepted.append(ev.accepted_drafts)
        outputs.append(out)
        margins.append([round(m, 4) for m in marg])
    return {"model": model, "target": resolve_model(model), "head": str(Path(head).resolve()), "head_name": str(head),
            "head_kind": kind_of_folder(head).name, "k": k, "max_new_tokens": max_new,
            "max_model_len": max(len(p) for p in prompts) + max_new + k + 8, "questions": str(questions),
            "prompts": prompts, "outputs": outputs, "margins": margins, "accepted": accepted}


def per_position(accepted: list[int], k: int) -> list[float]:
    """Share of verify steps whose chain was accepted at least to position j (j = 1..k)."""
    return [round(sum(a >= j for a in accepted) / max(len(accepted), 1), 4) for j in range(1, k + 1)]


def compare(ours: dict, theirs: dict) -> dict:
    """Token-for-token agreement and acceptance of the two engines on the same prompts and chain length."""
    same = [a == b for a, b in zip(ours["outputs"], theirs["outputs"])]
    parted = []
    for i, (a, b) in enumerate(zip(ours["outputs"], theirs["outputs"])):
        if a != b:
            j = next((t for t, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            parted.append({"prompt": i, "token": j, "our_margin": ours["margins"][i][j] if j < len(a) else None})
    spec, k = theirs["spec"], ours["k"]
    drafts = max(spec["drafts"], 1)
    acc = ours["accepted"]
    return {"engine": "vllm", "version": theirs["version"], "model": ours["model"],
            "head": ours.get("head_name", ours["head"]), "prompts": len(ours["outputs"]), "identical": sum(same),
            "vllm_mean_accepted": round(1 + spec["accepted_tokens"] / drafts, 3),
            "our_tau_chain": round(1 + sum(acc) / max(len(acc), 1), 3), "k": k,
            "vllm_per_position": [round(v / drafts, 4) for v in spec["accepted_per_pos"]],
            "our_per_position": per_position(acc, k), "first_differences": parted[:10]}


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m core.interop", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="say what stops vLLM from reading a head folder")
    c.add_argument("head")
    e = sub.add_parser("export", help="rewrite an EAGLE-1/2 head folder for one engine (see save_head)")
    e.add_argument("head")
    e.add_argument("out")
    e.add_argument("--engine", choices=("sglang", "vllm"), required=True)
    k = sub.add_parser("compact", help="store a head folder's weights compact in place (int8 + xz, core/drafters/storage.py)")
    k.add_argument("head")
    k.add_argument("--levels", type=int, default=storage.LEVELS,
                   help="integer levels each side of zero (default 63; at most 127, int8's range; fewer compress further, "
                        "with more rounding)")
    x = sub.add_parser("expand", help="write a compact head folder's full layout (model.safetensors) back in place")
    x.add_argument("head")
    o = sub.add_parser("ours", help="our fp32 greedy chain run; writes the job for scripts/vllm_side.py")
    o.add_argument("--model", default="smollm2-135m-instruct")
    o.add_argument("--head", required=True)
    o.add_argument("--questions", default=str(DATA / "mt_bench_questions.jsonl"))
    o.add_argument("--prompts", type=int, default=80, help="first N questions (their first turns)")
    o.add_argument("--k", type=int, default=3, help="speculative tokens per step (a chain)")
    o.add_argument("--max-new-tokens", type=int, default=128)
    o.add_argument("--out", required=True)
    m = sub.add_parser("compare", help="compare our run with vLLM's; prints one JSON object last")
    m.add_argument("ours")
    m.add_argument("theirs")
    a = p.parse_args(argv)
    try:
        if a.cmd == "check":
            problems = vllm_problems(a.head)
            for line in problems:
                print(line)
            print(f"{a.head}: " + ("vLLM reads it unedited" if not problems else f"{len(problems)} problem(s)"))
            return 1 if problems else 0
        if a.cmd == "export":
            export(a.head, a.out, a.engine)
            print(f"{a.out}: written for {a.engine}")
            return 0
        if a.cmd == "compact":
            print(json.dumps(storage.compact_folder(a.head, levels=a.levels)))
            return 0
        if a.cmd == "expand":
            if not storage.is_compact(a.head):
                raise ValueError(f"{a.head} has no compact weights to expand")
            sd = storage.read_state(a.head)
            storage.write_full(a.head, sd)
            print(f"{a.head}: {storage.FULL} written")
            return 0
        if a.cmd == "ours":
            if a.k < 1 or a.prompts < 1 or a.max_new_tokens < 1:
                raise ValueError("--k, --prompts and --max-new-tokens must be at least 1")
            job = run_ours(a.model, a.head, a.questions, a.prompts, a.k, a.max_new_tokens)
            Path(a.out).write_text(json.dumps(job) + "\n")
            print(f"ours: {len(job['prompts'])} prompts, tau (chain, per verify step) "
                  f"{1 + sum(job['accepted']) / max(len(job['accepted']), 1):.3f}")
            return 0
        result = compare(json.loads(Path(a.ours).read_text()), json.loads(Path(a.theirs).read_text()))
        print(json.dumps(result))
        return 0
    except (ValueError, OSError, KeyError) as e:
        return fail("core.interop", e)  # a refused conversion: one line, status 2 (core/cli.py)


if __name__ == "__main__":
    sys.exit(main())
