#!/usr/bin/env bash
# The shipped Gemma 3 270M draft head, from nothing: two data rounds of `python -m core.train`.
# Every stage resumes from its --out folder, so an interrupted run continues where it stopped.
# Round 1: 2,880 short prompts and text passages (prompts cut at 320 tokens), trained from scratch.
# Round 2: every training prompt of at least 1,500 characters kept whole (passages and documents with their
#          instruction at the end), trained together with round 1's shards, starting from round 1's head.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m core.train --out runs/gemma-3-270m --head-out runs/gemma-3-270m/head \
  --n-prompts 3000 --n-text 600 --max-shards 60 --batch 48 --max-prompt 320 --new-tokens 144 --max-text 768 \
  --sample-share 0.3 --epochs 4 --ttt-steps 2 --lr 2e-3 --p-weight 0.5 --tokens-per-batch 2048 --draft-vocab 12288 \
  --eval-per-category 2 --eval-max-new 64
python -m core.train --out runs/gemma-3-270m-long --head-out static/heads/gemma-3-270m \
  --init runs/gemma-3-270m/head --extra-shards runs/gemma-3-270m/shards \
  --n-prompts 816 --n-text 0 --min-prompt-chars 1500 --batch 48 --max-prompt 1024 --new-tokens 144 \
  --sample-share 0.3 --seed 1 --epochs 1.5 --ttt-steps 2 --lr 5e-4 --p-weight 0.5 --tokens-per-batch 4096 \
  --max-len 1280 --draft-vocab 12288 --eval-per-category 2 --eval-max-new 64
