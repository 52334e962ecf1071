#!/usr/bin/env bash
# Round 8 of the default chat model's head (Qwen2.5-Coder-0.5B-Instruct): round 7's plan finished and the one group
# round 7 lost on the card (GSM8K-style math reasoning) given answers of its own, then the shipped head (round 7)
# trained on every chat answer there is, one optimizer and one schedule (docs/training.md, "Round 8").
#   0. rebuild round 7's shards and round 5's first two (held out) from their committed token ids when runs/ lacks
#      them (one teacher-forced forward each);
#   1. more of round 7's planned batches (chat turns of prompts.jsonl, up to R7_SHARDS of 40,
#      default 36: 32 were generated in round 7), then round 8's:
#      the target's answers to GSM8K's training questions (prompts.jsonl's gsm8k_train rows, never its test set),
#      R8_SHARDS batches of 96 (default 5); both packed as token ids into data/tokens/ (the data survives the machine);
#   2. shards 0-1 of rounds 5 and 7 and shard 0 of round 8 are held out (the curve); the run: the shipped head
#      fine-tuned on every other shard of rounds 7 and 8 for EPOCHS epochs at peak lr LR (the state is saved every 15
#      minutes and a rerun resumes it);
#   3. the new head's card and the shipped head's on the same machine (31 dev-split prompts, 128 tokens, head alone
#      at 16,5,4, T=0 and T=1), then each held-out set measured on its own for the shipped head and the new one.
# None of it writes static/heads/: copy runs/q8/head there when its card beats the shipped head's at both
# temperatures (one file replaced), with the card as its training.json "evaluation".
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${DATA:-../shared/data}"
MODEL=qwen2.5-coder-0.5b-instruct
R7=data/tokens/$MODEL/r7
R8=data/tokens/$MODEL/r8
if [ ! -d runs/q5-data/shards ] || [ "$(ls runs/q5-data/shards | wc -l)" -lt 2 ]; then
  python -m core.train.tokens rebuild data/tokens/$MODEL/r5 --out runs/q5-data/shards --shards 2
fi
if [ ! -d runs/q7-data/shards ]; then
  python -m core.train.tokens rebuild "$R7" --out runs/q7-data/shards
fi
if [ -f "$R8/tokens.safetensors.xz" ] && [ ! -d runs/q8-data/shards ]; then
  python -m core.train.tokens rebuild "$R8" --out runs/q8-data/shards
fi
settings() {  # settings(prompt description, seed, command): round.json's generation settings
  cat <<JSON
{"model": "$MODEL", "prompts": "$1", "prompts_sha256": "$(sha256sum "$DATA/train/prompts.jsonl" | cut -c1-64)",
 "chat_template": true, "seed": $2, "sample_share": 0.5, "new_tokens": 192, "max_prompt": 384, "batch": 96,
 "command": "$3"}
JSON
}
if [ "${GENERATE:-1}" = 1 ]; then
  python -m core.train --model $MODEL --chat --head-type eagle --out runs/q7-data --data-only \
    --prompts "$DATA/train/prompts.jsonl" --sources sharegpt_sg90k,sharegpt_v3_1000,sharegpt_v3_500,self_instruct_seed \
    --n-prompts 3835 --n-text 0 --max-shards "${R7_SHARDS:-36}" --batch 96 --max-prompt 384 --new-tokens 192 \
    --sample-share 0.5 --prefill-share 0.0 --seed 7
  python -m core.train.tokens pack runs/q7-data/shards "$R7" --settings <(settings \
    "train/prompts.jsonl (sources sharegpt_sg90k, sharegpt_v3_1000, sharegpt_v3_500, self_instruct_seed)" 7 \
    "recipes/qwen2.5-coder-0.5b-r7-data.sh (shards 0-31), recipes/qwen2.5-coder-0.5b-r8.sh (shards 32 on)")
  python -m core.train --model $MODEL --chat --head-type eagle --out runs/q8-data --data-only \
    --prompts "$DATA/train/prompts.jsonl" --sources gsm8k_train \
    --n-prompts 7473 --n-text 0 --max-shards "${R8_SHARDS:-5}" --batch 96 --max-prompt 384 --new-tokens 192 \
    --sample-share 0.5 --prefill-share 0.0 --seed 8
  python -m core.train.tokens pack runs/q8-data/shards "$R8" --settings <(settings \
    "train/prompts.jsonl (source gsm8k_train)" 8 "recipes/qwen2.5-coder-0.5b-r8.sh")
fi
link() {  # link(folder, round's shard folder, first, last): shards first..last of a round, as a folder of their own
  mkdir -p "$1"
  for f in $(ls "$2"/shard_*.safetensors | sort | sed -n "$(($3 + 1)),$(($4 + 1))p"); do ln -sf "$(realpath "$f")" "$1/"; done
}
link runs/q8-held5 runs/q5-data/shards 0 1
link runs/q8-held7 runs/q7-data/shards 0 1
link runs/q8-held8 runs/q8-data/shards 0 0
link runs/q8-train7 runs/q7-data/shards 2 999  # one folder per round: every round names its shards shard_00000...
link runs/q8-train8 runs/q8-data/shards 1 999
python -m core.train --model $MODEL --chat --skip-data --n-prompts 1 --n-text 0 --max-len 768 \
  --init static/heads/$MODEL --tokens-per-batch 4096 --warmup-share 0.05 --schedule cosine --seed 8 \
  --heldout-shards runs/q8-held5 --heldout-shards runs/q8-held7 --heldout-shards runs/q8-held8 \
  --extra-shards runs/q8-train7 --extra-shards runs/q8-train8 \
  --epochs "${EPOCHS:-1}" --lr "${LR:-1e-4}" --eval-every "${EVAL_EVERY:-100}" --ttt-steps "${TTT:-2}" \
  --p-weight "${PW:-2.0}" --eval-per-category 0 --out runs/q8
for head in runs/q8/head static/heads/$MODEL; do  # both cards on this machine: the shipping decision compares them
  python -m core.train.evaluate --card --max-new-tokens 128 --model $MODEL --head "$head" --dtype auto \
    --tree 16,5,4,0 --chat --chain-depth 0 --json "runs/card_$(basename "$(dirname "$head")").json"
done
for head in static/heads/$MODEL runs/q8/head; do
  name=$(basename "$(dirname "$head")")
  for set in 5 7 8; do
    python -m core.train.evaluate --model $MODEL --head "$head" --dtype auto --heldout "runs/q8-held$set" \
      --json "runs/heldout_r${set}_$name.json"
  done
done
