"""The vLLM half of recipes/vllm.sh: greedy decoding with one of our heads as vLLM's speculative drafter.

Runs inside vLLM's own virtual environment (runs/vllm/venv) and imports nothing from this project, so it can be
read as a plain vLLM user's script. Input: the JSON written by `python -m core.interop ours` (target folder, head
folder, head kind, prompt token ids, k, new tokens). Output: the same prompts' generated ids and vLLM's own
spec-decode counters (drafts, draft tokens, accepted tokens, accepted tokens per position), as JSON.

    runs/vllm/venv/bin/python scripts/vllm_side.py OURS.json VLLM.json
"""
from __future__ import annotations

import json
import sys
import time


def counters(metrics) -> dict:
    """vLLM's spec-decode counters from LLM.get_metrics() (summed over label sets)."""
    out: dict = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_pos": []}
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted_tokens"}
    for m in metrics:
        if m.name in names:
            out[names[m.name]] += int(m.value)
        elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":  # one vector per label set
            acc = out["accepted_per_pos"]
            acc += [0] * (len(m.values) - len(acc))
            for i, v in enumerate(m.values):
                acc[i] += int(v)
    return out


def main(src: str, dst: str) -> int:
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    job = json.loads(open(src).read())
    method = "eagle3" if job["head_kind"] == "eagle3" else "eagle"
    t0 = time.time()
    llm = LLM(model=job["target"], dtype="float32", seed=0, max_model_len=job["max_model_len"],
              skip_tokenizer_init=True, disable_log_stats=False, enforce_eager=True,
              speculative_config={"method": method, "model": job["head"], "num_speculative_tokens": job["k"]})
    load_s = time.time() - t0
    params = SamplingParams(temperature=0.0, max_tokens=job["max_new_tokens"], ignore_eos=True, detokenize=False)
    t0 = time.time()
    outs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in job["prompts"]], params, use_tqdm=False)
    gen_s = time.time() - t0
    result = {"engine": "vllm", "version": vllm.__version__, "method": method, "load_s": round(load_s, 1),
              "generate_s": round(gen_s, 1), "outputs": [list(o.outputs[0].token_ids) for o in outs],
              "spec": counters(llm.get_metrics())}
    open(dst, "w").write(json.dumps(result) + "\n")
    print(f"vllm {vllm.__version__}: {len(outs)} prompts in {gen_s:.1f} s, spec counters {result['spec']}")
    return 0


if __name__ == "__main__":  # vLLM spawns its engine process: the entry point must be guarded
    sys.exit(main(*sys.argv[1:3]))
