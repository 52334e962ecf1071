#!/usr/bin/env bash
# Round 9 of the default chat model's head (Qwen2.5-Coder-0.5B-Instruct): the draft vocabulary grown to the tokens
# the target writes, and fresh answers of the kind chat users ask for (docs/training.md, "Round 9").
#   0. the held-out shards (round 5's 0-1, round 7's 0-1, round 8's 0) rebuilt from their committed token ids when
#      runs/ lacks them (one teacher-forced forward each);
#   1. the shipped head (round 7) with its 16,384 draft ids kept and the 4,096 ids it lacks that the target generated
#      most in rounds 5, 7 and 8 added (core/train/revocab.py: no weight changes, the new ids score against the
#      target's own LM-head rows);
#   2. round 9's data: the target's answers to the chat-like prompts of prompts2.jsonl (GPTeacher code generation
#      and role-play, OpenAssistant turns; round 5 used the same file, and the prompts it already continued are left
#      out by its committed ids), R9_SHARDS batches of 96 (default 24; 72 planned), kept as token ids in data/tokens/;
#   3. the grown head trained on round 9's shards 1 on (shard 0 held out beside the others) for EPOCHS epochs at peak
#      lr LR, one optimizer and one cosine schedule (state saved every 15 minutes; a rerun resumes);
#   4. the card of the trained head (31 dev-split prompts, 128 tokens, head alone at 16,5,4, T=0 and T=1) and the
#      held-out measure of the shipped, grown and trained heads (top1_all: every answer position, so the three
#      vocabularies compare).
# None of it writes static/heads/: copy a head there when its card beats the shipped head's at both temperatures,
# then store it compact in place (python -m core.interop compact static/heads/MODEL).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${DATA:-../shared/data}"
MODEL=qwen2.5-coder-0.5b-instruct
TOKENS=data/tokens/$MODEL
R9=$TOKENS/r9
python -m core.train.tokens rebuild $TOKENS/r5 --out runs/q5-data/shards --shards 2
python -m core.train.tokens rebuild $TOKENS/r7 --out runs/q7-held/shards --shards 2
python -m core.train.tokens rebuild $TOKENS/r8 --out runs/q8-held/shards --shards 1
if [ ! -f runs/q9/vocab-head/model.safetensors ]; then
  python -m core.train.revocab --head static/heads/$MODEL --shards $TOKENS/r5 --shards $TOKENS/r7 \
    --shards $TOKENS/r8 --size "${VOCAB:-20480}" --keep --out runs/q9/vocab-head
fi
if [ -f "$R9/tokens.safetensors.xz" ] && [ ! -d runs/q9-data/shards ]; then
  python -m core.train.tokens rebuild "$R9" --out runs/q9-data/shards
fi
if [ "${GENERATE:-1}" = 1 ]; then
  python -m core.train --model $MODEL --chat --head-type eagle --out runs/q9-data --data-only \
    --prompts "$DATA/train/prompts2.jsonl" --exclude-shards $TOKENS/r5 \
    --sources gpteacher_codegen,gpteacher_roleplay,oasst_prompt_lottery,oasst_eval_tree,oasst_seed_hh \
    --n-prompts 6876 --n-text 0 --max-shards "${R9_SHARDS:-24}" --batch 96 --max-prompt 384 --new-tokens 192 \
    --sample-share 0.5 --prefill-share 0.0 --seed 9
  python -m core.train.tokens pack runs/q9-data/shards "$R9" --settings <(cat <<JSON
{"model": "$MODEL", "prompts": "train/prompts2.jsonl (sources gpteacher_codegen, gpteacher_roleplay, oasst_prompt_lottery, oasst_eval_tree, oasst_seed_hh; round 5's prompts left out)",
 "prompts_sha256": "$(sha256sum "$DATA/train/prompts2.jsonl" | cut -c1-64)",
 "chat_template": true, "seed": 9, "sample_share": 0.5, "new_tokens": 192, "max_prompt": 384, "batch": 96,
 "command": "recipes/qwen2.5-coder-0.5b-r9.sh"}
JSON
)
fi
link() {  # link(folder, round's shard folder, first, last): shards first..last of a round, as a folder of their own
  mkdir -p "$1"
  for f in $(ls "$2"/shard_*.safetensors | sort | sed -n "$(($3 + 1)),$(($4 + 1))p"); do ln -sf "$(realpath "$f")" "$1/"; done
}
link runs/q9-held9 runs/q9-data/shards 0 0
link runs/q9-train9 runs/q9-data/shards 1 999
python -m core.train --model $MODEL --chat --skip-data --n-prompts 1 --n-text 0 --max-len 768 \
  --init runs/q9/vocab-head --tokens-per-batch 4096 --warmup-share 0.05 --schedule cosine --seed 9 \
  --heldout-shards runs/q5-data/shards --heldout-shards runs/q7-held/shards --heldout-shards runs/q8-held/shards \
  --heldout-shards runs/q9-held9 --extra-shards runs/q9-train9 \
  --epochs "${EPOCHS:-2}" --lr "${LR:-1e-4}" --eval-every "${EVAL_EVERY:-100}" --ttt-steps "${TTT:-2}" \
  --p-weight "${PW:-2.0}" --eval-per-category 0 --out runs/q9
for head in runs/q9/head; do  # the grown head untrained is compared on the held-out measure (top1_all) below
  python -m core.train.evaluate --card --max-new-tokens 128 --model $MODEL --head "$head" --dtype auto \
    --tree 16,5,4,0 --chat --chain-depth 0 --json "runs/card_q9_$(basename "$head").json"
done
for head in static/heads/$MODEL runs/q9/vocab-head runs/q9/head; do
  python -m core.train.evaluate --model $MODEL --head "$head" --dtype auto --heldout runs/q5-data/shards \
    --heldout runs/q7-held/shards --heldout runs/q8-held/shards --heldout runs/q9-held9 \
    --json "runs/heldout_q9_$(basename "$head").json"
done
