#!/usr/bin/env bash
# EAGLE-3 and EAGLE-1/2 heads for Gemma 3 270M trained on the same data, from nothing, in three stages.
# Every stage resumes from its --out folder (shards are skipped when present, training continues from state.pt),
# so an interrupted run continues where it stopped: rerun the script.
#   1. data: training prompts continued by the target (on-policy; the features come from the generation itself,
#      EAGLE-3 layer taps included) plus training text by one teacher-forced forward (prefill-only).
#   2. an EAGLE-3 head on those shards (fused taps, own LM head, 5-step training-time test), keeping snapshots
#      along the way and measuring tau of each: the curve of tau against the data seen.
#   3. an EAGLE-1/2 head on the same shards (feature + token loss), for the side-by-side comparison.
#   4. (FINETUNE=1) the shipped EAGLE-1/2 head fine-tuned for one epoch on the same shards (README: "EAGLE-3, more
#      data, and where the head stood"); it writes runs/g3-eagle-ft/head, not the shipped folder.
# Scale it with SHARDS (batches of 48 rows; on 2 CPU cores one generated batch takes about 30 s) and EPOCHS.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARDS=${SHARDS:-55}
EPOCHS=${EPOCHS:-1}
DATA=runs/g3-data
python -m core.train --head-type eagle3 --out "$DATA" --data-only \
  --n-prompts 4000 --n-text 400 --max-shards "$SHARDS" --batch 48 --max-prompt 320 --new-tokens 144 \
  --max-text 768 --sample-share 0.3 --prefill-share 0.0 --seed 3
python -m core.train --head-type eagle3 --out runs/g3-eagle3 --head-out runs/g3-eagle3/head \
  --skip-data --extra-shards "$DATA/shards" --n-prompts 1 --n-text 0 \
  --epochs "$EPOCHS" --ttt-steps 5 --lr 1e-3 --tokens-per-batch 2048 --draft-vocab 12288 --snapshots 3 \
  --eval-per-category 2 --eval-max-new 64
python -m core.train --head-type eagle --out runs/g3-eagle --head-out runs/g3-eagle/head \
  --skip-data --extra-shards "$DATA/shards" --n-prompts 1 --n-text 0 \
  --epochs "$EPOCHS" --ttt-steps 2 --lr 2e-3 --p-weight 0.5 --tokens-per-batch 2048 --draft-vocab 12288 \
  --eval-per-category 2 --eval-max-new 64
if [ "${FINETUNE:-0}" = 1 ]; then
  python -m core.train --head-type eagle --out runs/g3-eagle-ft --head-out runs/g3-eagle-ft/head \
    --init static/heads/gemma-3-270m --skip-data --extra-shards "$DATA/shards" --n-prompts 1 --n-text 0 \
    --epochs 1 --ttt-steps 2 --lr 5e-4 --p-weight 0.5 --tokens-per-batch 4096 --draft-vocab 12288 \
    --eval-per-category 2 --eval-max-new 64
fi
