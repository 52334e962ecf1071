#!/usr/bin/env bash
# Round 6 of the default chat model's head (Qwen2.5-Coder-0.5B-Instruct): one training run over all the data there
# is, trained the way the reference trainers train (docs/training.md, "Round 6"):
#   - the answer tokens only are scored; the draft vocabulary is counted over answers; a guess the draft vocabulary
#     cannot make is left out; stored answers whose prompt lost the chat template's tail are dropped;
#   - one optimizer and one schedule over several epochs (peak lr LR, warmup 5 % of the steps, cosine decay);
#   - round 5's shards 0-1 are held out, never trained on: teacher-forced top-1 / top-3 on their answers every
#     EVAL_EVERY steps is the curve that picks heads (runs/q6/head/training.json, "heldout_curve");
#   - the state (head, optimizer, schedule, data position, curve) is saved every 15 minutes: rerun this script and
#     it resumes (rebuilt shards are skipped too).
# Steps:
#   0. rebuild round 5's shards from their committed token ids (data/tokens/; a teacher-forced forward);
#      SHARDS=N stops after the first N (a session's worth: on an AVX-512 BF16 EPYC about 60 s a shard, alone);
#   1. A/B arms, one change at a time, on shards 2-9 (AB=1): the new scoring against the old (--loss-on-prompt),
#      the token loss weighted 2.0 against 0.5, training-time test of 3 steps against 2, round 4's first layer alone
#      against both (--keep-layers 1);
#   2. the run: round 4's head fine-tuned on shards 2..SHARDS-1 for EPOCHS epochs;
#   3. the card (31 dev-split prompts, 128 tokens, head alone at 16,5,4) for the new head and for round 4.
# None of it writes static/heads/: copy runs/q6/head there when its card beats round 4's (one file replaced).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=qwen2.5-coder-0.5b-instruct
SHARDS=${SHARDS:-73}
R5=runs/q5-data/shards
if [ "${REBUILD:-1}" = 1 ]; then
  python -m core.train.tokens rebuild data/tokens/$MODEL/r5 --out $R5 --shards "$SHARDS"
fi
link() {  # link(folder, first, last): the rebuilt shards first..last, as a folder of their own
  mkdir -p "$1"
  for i in $(seq "$2" "$3"); do
    f="$(realpath $R5)/$(printf 'shard_%05d' "$i").safetensors"
    if [ -f "$f" ]; then ln -sf "$f" "$1/"; fi
  done
}
link runs/q5-held 0 1
link runs/q5-train 2 $((SHARDS - 1))
# Every run: round 4's head, answers scored, warmup 5 % then cosine, shards 0-1 held out.
if [ "${AB:-0}" = 1 ]; then
  link runs/ab-train 2 9
  python -m core.train --model $MODEL --chat --skip-data --n-prompts 1 --n-text 0 --max-len 768 \
    --init static/heads/$MODEL --tokens-per-batch 4096 --warmup-share 0.05 --schedule cosine --seed 6 \
    --heldout-shards runs/q5-held --extra-shards runs/ab-train --epochs 1 --lr 2e-4 --eval-every 10 \
    --eval-per-category 0 --out runs/ab-answers --ttt-steps 2 --p-weight 0.5
  python -m core.train --model $MODEL --chat --skip-data --n-prompts 1 --n-text 0 --max-len 768 \
    --init static/heads/$MODEL --tokens-per-batch 4096 --warmup-share 0.05 --schedule cosine --seed 6 \
    --heldout-shards runs/q5-held --extra-shards runs/ab-train --epochs 1 --lr 2e-4 --eval-every 10 \
    --eval-per-category 0 --out runs/ab-prompt --ttt-steps 2 --p-weight 0.5 --loss-on-prompt
  python -m core.train --model $MODEL --chat --skip-data --n-prompts 1 --n-text 0 --max-len 768 \
    --init static/heads/$MODEL --tokens-per-batch 4096 --warmup-share 0.05 --schedule cosine --seed 6 \
    --heldout-shards runs/q5-held --extra-shards runs/ab-train --epochs 1 --lr 2e-4 --eval-every 10 \
    --eval-per-category 0 --out runs/ab-pw2 --ttt-steps 2 --p-weight 2.0
  python -m core.train --model $MODEL --chat --skip-data --n-prompts 1 --n-text 0 --max-len 768 \
    --init static/heads/$MODEL --tokens-per-batch 4096 --warmup-share 0.05 --schedule cosine --seed 6 \
    --heldout-shards runs/q5-held --extra-shards runs/ab-train --epochs 1 --lr 2e-4 --eval-every 10 \
    --eval-per-category 0 --out runs/ab-ttt3 --ttt-steps 3 --p-weight 0.5
  python -m core.train --model $MODEL --chat --skip-data --n-prompts 1 --n-text 0 --max-len 768 \
    --init static/heads/$MODEL --tokens-per-batch 4096 --warmup-share 0.05 --schedule cosine --seed 6 \
    --heldout-shards runs/q5-held --extra-shards runs/ab-train --epochs 1 --lr 2e-4 --eval-every 10 \
    --eval-per-category 0 --out runs/ab-one-layer --ttt-steps 2 --p-weight 0.5 --keep-layers 1
fi
python -m core.train --model $MODEL --chat --skip-data --n-prompts 1 --n-text 0 --max-len 768 \
  --init static/heads/$MODEL --tokens-per-batch 4096 --warmup-share 0.05 --schedule cosine \
  --heldout-shards runs/q5-held --seed 6 --extra-shards runs/q5-train --epochs "${EPOCHS:-3}" --lr "${LR:-2e-4}" \
  --eval-every "${EVAL_EVERY:-25}" --ttt-steps "${TTT:-2}" --p-weight "${PW:-0.5}" --eval-per-category 0 --out runs/q6
for head in runs/q6/head static/heads/$MODEL; do
  python -m core.train.evaluate --card --max-new-tokens 128 --model $MODEL --head "$head" --dtype auto \
    --tree 16,5,4,0 --chat --json "runs/card_$(basename "$(dirname "$head")")_$(basename "$head").json"
done
