#!/usr/bin/env bash
# Round 7 data for the default chat model's head (Qwen2.5-Coder-0.5B-Instruct): the target's own answers to the chat
# turns of prompts.jsonl (ShareGPT first turns and the self-instruct seed tasks, 3,835 prompts), the kind of request
# MT-bench and the app's users send. Round 6 trained on round 5's answers (prompts2.jsonl: T0 templates, FLAN
# chains of thought, short intents) and gained 10 points of held-out top-1 on that distribution but +0.05 τ on the
# card (docs/training.md, "Round 6"); round 4's chat answers to these prompts were lost with their machine.
# Kept in git as token ids (data/tokens/, core/train/tokens.py); every step resumes (a planned shard on disk is
# skipped; SHARDS=N stops after the first N of the 40 planned batches).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${DATA:-../shared/data}"
MODEL=qwen2.5-coder-0.5b-instruct
R7=data/tokens/$MODEL/r7
if [ -f "$R7/tokens.safetensors.xz" ] && [ ! -d runs/q7-data/shards ]; then
  python -m core.train.tokens rebuild "$R7" --out runs/q7-data/shards
fi
python -m core.train --model $MODEL --chat --head-type eagle --out runs/q7-data --data-only \
  --prompts "$DATA/train/prompts.jsonl" --sources sharegpt_sg90k,sharegpt_v3_1000,sharegpt_v3_500,self_instruct_seed \
  --n-prompts 3835 --n-text 0 --max-shards "${SHARDS:-0}" --batch 96 --max-prompt 384 --new-tokens 192 \
  --sample-share 0.5 --prefill-share 0.0 --seed 7
python -m core.train.tokens pack runs/q7-data/shards "$R7" --settings <(cat <<JSON
{"model": "$MODEL", "prompts": "train/prompts.jsonl (sources sharegpt_sg90k, sharegpt_v3_1000, sharegpt_v3_500, self_instruct_seed)",
 "prompts_sha256": "$(sha256sum "$DATA/train/prompts.jsonl" | cut -c1-64)",
 "chat_template": true, "seed": 7, "sample_share": 0.5, "new_tokens": 192, "max_prompt": 384, "batch": 96,
 "command": "recipes/qwen2.5-coder-0.5b-r7-data.sh"}
JSON
)
