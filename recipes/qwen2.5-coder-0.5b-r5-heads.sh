#!/usr/bin/env bash
# Heads for the default chat model (Qwen2.5-Coder-0.5B-Instruct) on round 5's first shards: the evidence of τ
# against data and of EAGLE-1/2 against EAGLE-3 on the same data, sized for one CPU session.
#   0. rebuild the first SHARDS shards of round 5 from their committed token ids (data/tokens/, one teacher-forced
#      forward; the EAGLE-3 layer taps come from the same forward, so one folder serves both head kinds);
#   1. the shipped head (round 4) fine-tuned one epoch on them, with snapshots (τ at 1.57M tokens and beyond);
#   2. an EAGLE-1/2 head from nothing on the first PAIR_SHARDS of them;
#   3. an EAGLE-3 head from nothing on the same PAIR_SHARDS shards (each kind at its own recipe's settings, as
#      recipes/gemma-3-270m-eagle3.sh), both carded on PAIR_CARD prompts per category (a CPU session's worth:
#      each card measure of 10 prompts took about 3 minutes here; PAIR_SNAPSHOTS=N adds a curve for each).
# Every step resumes (shards on disk are skipped, training continues from state.pt): rerun the script. Each
# training card (runs/*/head/training.json) holds τ on 10 MT-bench first turns (64 tokens, head alone, tree
# 16,6,6) at T=0 and T=1, and τ of every snapshot at T=0. None of it writes static/heads/.
# As run on 2026-12-06 (docs/training.md, "Round 5's first shards"): the defaults below.
# On an AVX2-only EPYC (2 cores) a 19k-token shard rebuilds in about 100 s in fp32.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${DATA:-../shared/data}"
SHARDS=${SHARDS:-16}
MODEL=qwen2.5-coder-0.5b-instruct
R5=runs/q5-data/shards
PAIR_SHARDS=${PAIR_SHARDS:-8}
PAIR=runs/q5-data${PAIR_SHARDS}/shards  # links to the first PAIR_SHARDS rebuilt shards
mkdir -p $PAIR
for i in $(seq 0 $((PAIR_SHARDS - 1))); do ln -sf "$(realpath $R5)/$(printf 'shard_%05d' "$i").safetensors" $PAIR/; done

if [ "${REBUILD:-1}" = 1 ]; then  # REBUILD=0 when the shards are on disk already (saves loading the target once)
  python -m core.train.tokens rebuild data/tokens/$MODEL/r5 --out $R5 --head-type eagle3 --shards "$SHARDS"
fi
python -m core.train --model $MODEL --chat --skip-data --extra-shards $R5 --n-prompts 1 --n-text 0 --epochs 1 \
  --max-len 768 --seed 5 --snapshots 4 --head-type eagle --out runs/q5-ft --init static/heads/$MODEL \
  --ttt-steps 2 --lr 1e-3 --p-weight 0.5 --tokens-per-batch 4096 \
  --eval-questions "$DATA/mt_bench_questions.jsonl" --eval-per-category 10 --eval-max-new 64
python -m core.train --model $MODEL --chat --skip-data --extra-shards $PAIR --n-prompts 1 --n-text 0 --epochs 1 \
  --max-len 768 --seed 5 --head-type eagle --out runs/q5-eagle --draft-vocab 16384 \
  --ttt-steps 2 --lr 2e-3 --p-weight 0.5 --tokens-per-batch 2048 \
  --eval-questions "$DATA/mt_bench_questions.jsonl" --eval-per-category "${PAIR_CARD:-5}" --eval-max-new 64 \
  --snapshots "${PAIR_SNAPSHOTS:-0}"
python -m core.train --model $MODEL --chat --skip-data --extra-shards $PAIR --n-prompts 1 --n-text 0 --epochs 1 \
  --max-len 768 --seed 5 --head-type eagle3 --out runs/q5-eagle3 --draft-vocab 16384 \
  --ttt-steps 5 --lr 1e-3 --tokens-per-batch 2048 \
  --eval-questions "$DATA/mt_bench_questions.jsonl" --eval-per-category "${PAIR_CARD:-5}" --eval-max-new 64 \
  --snapshots "${PAIR_SNAPSHOTS:-0}"
# The round-4 head on the same card and machine (the anchor of the curve; old heads come from git history):
python -m core.train.evaluate --questions "$DATA/mt_bench_questions.jsonl" --per-category 10 --max-new-tokens 64 \
  --model $MODEL --head static/heads/$MODEL --dtype auto --tree 16,6,6,0 --chat --temperatures 0 --json runs/card_r4.json
mkdir -p runs/old-heads/r1  # round 1 (0.11M tokens), from git history
for f in config.json model.safetensors training.json; do git show 1dd066b:static/heads/$MODEL/$f > runs/old-heads/r1/$f; done
python -m core.bench.head_curve runs/old-heads/r1 static/heads/$MODEL runs/q5-ft/head runs/q5-eagle/head \
  runs/q5-eagle3/head --eval static/heads/$MODEL=runs/card_r4.json --json results/heads/qwen_r5_curve.json
# The EAGLE-3 head in vLLM (docs/serving.md):
#   PROMPTS=8 NEW=64 K=3 MODEL=$MODEL HEAD=runs/q5-eagle3/head bash recipes/vllm.sh
