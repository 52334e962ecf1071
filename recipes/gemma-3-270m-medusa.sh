#!/usr/bin/env bash
# Token-level against feature-level drafting from the same data: a Medusa head and an EAGLE-1/2 head for Gemma 3
# 270M trained on the same feature shards, with the same epochs and draft vocabulary, from nothing.
# Every stage resumes from its --out folder (shards are skipped when present, training continues from state.pt),
# so an interrupted run continues where it stopped: rerun the script.
#   1. data: training prompts continued by the target (on-policy, 30 % sampled at T=1) plus training text by one
#      teacher-forced forward; the shards hold the target's last features.
#   2. a Medusa head (6 ResBlocks on the last feature, tokens t+2..t+7, the target's LM head shared): it ships in
#      static/heads/gemma-3-270m-medusa.
#   3. an EAGLE-1/2 head on the same shards (runs/same-data-eagle/head), for `core.bench --head-b`.
# Scale it with SHARDS (batches of 48 rows; on 2 CPU cores one generated batch takes about 30 s) and EPOCHS.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARDS=${SHARDS:-30}
EPOCHS=${EPOCHS:-2}
DATA=runs/same-data
python -m core.train --head-type eagle --out "$DATA" --data-only \
  --n-prompts 4000 --n-text 400 --max-shards "$SHARDS" --batch 48 --max-prompt 320 --new-tokens 144 \
  --max-text 768 --sample-share 0.3 --prefill-share 0.0 --seed 5
python -m core.train --head-type medusa --medusa-heads 6 --out runs/same-data-medusa \
  --head-out static/heads/gemma-3-270m-medusa --skip-data --extra-shards "$DATA/shards" --n-prompts 1 --n-text 0 \
  --epochs "$EPOCHS" --lr 1e-3 --tokens-per-batch 4096 --draft-vocab 12288 --eval-per-category 2 --eval-max-new 64
python -m core.train --head-type eagle --out runs/same-data-eagle --head-out runs/same-data-eagle/head \
  --skip-data --extra-shards "$DATA/shards" --n-prompts 1 --n-text 0 \
  --epochs "$EPOCHS" --ttt-steps 2 --lr 2e-3 --p-weight 0.5 --tokens-per-batch 4096 --draft-vocab 12288 \
  --eval-per-category 2 --eval-max-new 64
