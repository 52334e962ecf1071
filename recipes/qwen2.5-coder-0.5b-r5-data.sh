#!/usr/bin/env bash
# Round 5 data for the Qwen2.5-Coder-0.5B-Instruct head (the default model): fresh chat answers to prompts2.jsonl
# (34,363 varied prompts no earlier round used), then second turns (the target's own answer and a follow-up), each
# kept in git as token ids (data/tokens/, core/train/tokens.py) so a later machine rebuilds the features instead of
# generating again. Every step resumes:
#   - generation skips the shards already in runs/q5-data/shards (a fixed plan: shard i is always the same batch);
#   - on a machine without runs/, first rebuild the committed shards (step 0), then rerun this script: generation
#     continues after the last committed shard.
# QUESTIONS_DIR / DATA: where the training prompts live (default ../shared/data, as core.train's own default).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${DATA:-../shared/data}"
MODEL=qwen2.5-coder-0.5b-instruct
R5=data/tokens/$MODEL/r5
R5B=data/tokens/$MODEL/r5-turn2

# 0. Rebuild what an earlier machine generated (a teacher-forced forward; skipped when runs/ still has the shards).
if [ -f "$R5/tokens.safetensors.xz" ] && [ ! -d runs/q5-data/shards ]; then
  python -m core.train.tokens rebuild "$R5" --out runs/q5-data/shards
fi
# 1. First turns: 358 batches of 96 in the chat template, 192 new tokens, half the batches sampled at T=1.
#    SHARDS=N stops after the first N planned batches (a session's worth).
python -m core.train --model $MODEL --chat --head-type eagle --out runs/q5-data --data-only \
  --prompts "$DATA/train/prompts2.jsonl" --n-prompts 34363 --n-text 0 --max-shards "${SHARDS:-0}" --batch 96 \
  --max-prompt 384 --new-tokens 192 --sample-share 0.5 --prefill-share 0.0 --seed 5
python -m core.train.tokens pack runs/q5-data/shards "$R5" --settings <(cat <<JSON
{"model": "$MODEL", "prompts": "train/prompts2.jsonl", "prompts_sha256": "$(sha256sum "$DATA/train/prompts2.jsonl" | cut -c1-64)",
 "chat_template": true, "seed": 5, "sample_share": 0.5, "new_tokens": 192, "max_prompt": 384, "batch": 96,
 "command": "recipes/qwen2.5-coder-0.5b-r5-data.sh step 1"}
JSON
)
# 2. Second turns over the first turns written so far: each row's own follow-up (prompts2 has 124 conversations),
#    else a generic follow-up for a quarter of the rows.
python -m core.train.followups --model $MODEL --prompts "$DATA/train/prompts2.jsonl" \
  --first-turns runs/q5-data/shards --out runs/q5-turn2 --generic-share 0.25 --batch 48 --max-prompt 896 \
  --new-tokens 192 --sample-share 0.5 --seed 6
python -m core.train.tokens pack runs/q5-turn2/shards "$R5B" --settings <(cat <<JSON
{"model": "$MODEL", "prompts": "train/prompts2.jsonl + core/train/followups.py FOLLOWUPS", "chat_template": true,
 "seed": 6, "sample_share": 0.5, "new_tokens": 192, "max_prompt": 896, "batch": 48, "generic_share": 0.25,
 "command": "recipes/qwen2.5-coder-0.5b-r5-data.sh step 2"}
JSON
)
# 3. Train (not run yet): round 4's head fine-tuned on both, for example
#   python -m core.train --model $MODEL --chat --head-type eagle --out runs/qwen-coder-r5 --skip-data \
#     --extra-shards runs/q5-data/shards --extra-shards runs/q5-turn2/shards --init static/heads/$MODEL \
#     --n-prompts 1 --n-text 0 --epochs 1 --ttt-steps 2 --lr 1e-3 --p-weight 0.5 --tokens-per-batch 4096 \
#     --max-len 1024 --extend-vocab 2048 --seed 5
