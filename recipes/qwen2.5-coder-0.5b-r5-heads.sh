#!/usr/bin/env bash
# Heads for the default chat model (Qwen2.5-Coder-0.5B-Instruct) on round 5's first shards: the evidence of τ
# against data and of EAGLE-1/2 against EAGLE-3 on the same data, sized for one CPU session.
#   0. rebuild the first SHARDS shards of round 5 from their committed token ids (data/tokens/, one teacher-forced
#      forward; the EAGLE-3 layer taps come from the same forward, so one folder serves both head kinds);
#   1. the shipped head (round 4) fine-tuned one epoch on them, with snapshots (τ at 1.57M tokens and beyond);
#   2. an EAGLE-1/2 head from nothing on the same shards, with snapshots (the curve from the start);
#   3. an EAGLE-3 head from nothing on the same shards, with snapshots (each kind at its own recipe's settings,
#      as recipes/gemma-3-270m-eagle3.sh).
# Every step resumes (shards on disk are skipped, training continues from state.pt): rerun the script. Each
# training card (runs/*/head/training.json) holds τ on 10 MT-bench first turns (64 tokens, head alone, tree
# 16,6,6) at T=0 and T=1, and τ of every snapshot at T=0. None of it writes static/heads/.
# On an AVX2-only EPYC (2 cores) a 19k-token shard rebuilds in about 100 s in fp32.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${DATA:-../shared/data}"
SHARDS=${SHARDS:-16}
MODEL=qwen2.5-coder-0.5b-instruct
R5=runs/q5-data/shards
EVAL=(--eval-questions "$DATA/mt_bench_questions.jsonl" --eval-per-category 10 --eval-max-new 64)
COMMON=(--model $MODEL --chat --skip-data --extra-shards $R5 --n-prompts 1 --n-text 0 --epochs 1 --max-len 768
        --seed 5 --snapshots 4)

if [ "${REBUILD:-1}" = 1 ]; then  # REBUILD=0 when the shards are on disk already (saves loading the target once)
  python -m core.train.tokens rebuild data/tokens/$MODEL/r5 --out $R5 --head-type eagle3 --shards "$SHARDS"
fi
python -m core.train "${COMMON[@]}" --head-type eagle --out runs/q5-ft --init static/heads/$MODEL \
  --ttt-steps 2 --lr 1e-3 --p-weight 0.5 --tokens-per-batch 4096 "${EVAL[@]}"
python -m core.train "${COMMON[@]}" --head-type eagle --out runs/q5-eagle --draft-vocab 16384 \
  --ttt-steps 2 --lr 2e-3 --p-weight 0.5 --tokens-per-batch 2048 "${EVAL[@]}"
python -m core.train "${COMMON[@]}" --head-type eagle3 --out runs/q5-eagle3 --draft-vocab 16384 \
  --ttt-steps 5 --lr 1e-3 --tokens-per-batch 2048 "${EVAL[@]}"
