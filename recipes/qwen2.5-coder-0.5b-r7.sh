#!/usr/bin/env bash
# Round 7 of the default chat model's head (Qwen2.5-Coder-0.5B-Instruct): round 6's recipe (answers scored, one
# optimizer and one cosine schedule over several epochs, a held-out curve) over round 5's answers and round 7's chat
# answers together (docs/training.md, "Round 7").
#   0. rebuild both rounds' shards from their committed token ids when runs/ lacks them (a teacher-forced forward;
#      R5_SHARDS=N rebuilds round 5's first N only);
#   1. shards 0-1 of each round are held out and never trained on: teacher-forced top-1 / top-3 on their answers is
#      the curve (runs/q7/head/training.json "heldout_curve"), and each set is measured on its own for round 4 and
#      the new head (runs/heldout_*.json);
#   2. the run: round 4's head fine-tuned on every other shard for EPOCHS epochs; the state is saved every 15 minutes
#      and a rerun resumes it;
#   3. the card (31 dev-split prompts, 128 tokens, head alone at 16,5,4) for the new head.
# None of it writes static/heads/: copy runs/q7/head there when its card beats round 4's (one file replaced), with the
# card as its training.json "evaluation" (the T=0 τ scripts/gpu_day.py predicts from).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=qwen2.5-coder-0.5b-instruct
R5_SHARDS=${R5_SHARDS:-19}
if [ ! -d runs/q5-data/shards ] || [ "$(ls runs/q5-data/shards | wc -l)" -lt "$R5_SHARDS" ]; then
  python -m core.train.tokens rebuild data/tokens/$MODEL/r5 --out runs/q5-data/shards --shards "$R5_SHARDS"
fi
if [ ! -d runs/q7-data/shards ]; then
  python -m core.train.tokens rebuild data/tokens/$MODEL/r7 --out runs/q7-data/shards
fi
link() {  # link(folder, round's shard folder, first, last): shards first..last of a round, as a folder of their own
  mkdir -p "$1"
  for f in $(ls "$2"/shard_*.safetensors | sort | sed -n "$(($3 + 1)),$(($4 + 1))p"); do ln -sf "$(realpath "$f")" "$1/"; done
}
link runs/q7-held5 runs/q5-data/shards 0 1
link runs/q7-held7 runs/q7-data/shards 0 1
link runs/q7-train5 runs/q5-data/shards 2 $((R5_SHARDS - 1))  # one folder per round: both name their shards
link runs/q7-train7 runs/q7-data/shards 2 999                   # shard_00000..., so a shared folder would merge them
python -m core.train --model $MODEL --chat --skip-data --n-prompts 1 --n-text 0 --max-len 768 \
  --init static/heads/$MODEL --tokens-per-batch 4096 --warmup-share 0.05 --schedule cosine --seed 7 \
  --heldout-shards runs/q7-held5 --heldout-shards runs/q7-held7 --extra-shards runs/q7-train5 \
  --extra-shards runs/q7-train7 \
  --epochs "${EPOCHS:-3}" --lr "${LR:-2e-4}" --eval-every "${EVAL_EVERY:-100}" --ttt-steps "${TTT:-2}" \
  --p-weight "${PW:-2.0}" --eval-per-category 0 --out runs/q7
for head in static/heads/$MODEL runs/q7/head; do
  name=$(basename "$(dirname "$head")")
  python -m core.train.evaluate --model $MODEL --head "$head" --dtype auto --heldout runs/q7-held5 \
    --json "runs/heldout_r5_$name.json"
  python -m core.train.evaluate --model $MODEL --head "$head" --dtype auto --heldout runs/q7-held7 \
    --json "runs/heldout_r7_$name.json"
done
python -m core.train.evaluate --card --max-new-tokens 128 --model $MODEL --head runs/q7/head --dtype auto \
  --tree 16,5,4,0 --chat --chain-depth 0 --json runs/card_q7_head.json
