#!/usr/bin/env bash
# The shipped Gemma 3 270M draft head, from nothing: six data rounds of `python -m core.train`.
# Every stage resumes from its --out folder, so an interrupted run continues where it stopped.
# Round 1: 2,880 short prompts and text passages (prompts cut at 320 tokens), trained from scratch.
# Round 2: every training prompt of at least 1,500 characters kept whole (passages and documents with their
#          instruction at the end), trained together with round 1's shards, starting from round 1's head.
# Round 3: 8,064 training prompts drawn with a new seed from the whole pool (prompts of rounds 1-2 may come back,
#          with new cuts and continuations), cut at 512 tokens and continued by the target in batches of 96 (160 new
#          tokens, 70 % greedy / 30 % sampled; 84 shards, 1.85M tokens, 1.2M of them generated); round 2's head
#          fine-tuned one epoch on them; --snapshots 3 keeps heads along the way for the curve of tau against data.
# Round 4: German. The target writes 2,304 German samples after German openers; the 1,152 that read as German become
#          translation prompts (core.train.sources); the target continues them (160 new tokens, batch 96) and 384
#          text passages are prefilled beside them (1,536 rows, 16 shards); round 3's head is fine-tuned one epoch on
#          them, its draft vocabulary extended by the 4,096 most frequent tokens of this data it lacked (12,288 ->
#          16,384: round 3's vocabulary covered 57 % of the German continuations' tokens, the extended one 97 %).
# Round 5: English again. Training prompts drawn with a new seed, cut at 512 tokens and continued by the target in
#          batches of 96 (11 shards, 268K tokens, 158K generated); round 4's head fine-tuned one epoch on them together
#          with round 4's German shards, so the German is kept while the English comes back.
# Round 6: twice round 5's data. 576 new German translation prompts (seed 7) continued by the target (6 shards), and
#          40 English shards drawn with seed 7 (1.00M tokens, 572K generated); round 5's head fine-tuned one epoch on
#          both (1.11M tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m core.train --out runs/gemma-3-270m --head-out runs/gemma-3-270m/head \
  --n-prompts 3000 --n-text 600 --max-shards 60 --batch 48 --max-prompt 320 --new-tokens 144 --max-text 768 \
  --sample-share 0.3 --epochs 4 --ttt-steps 2 --lr 2e-3 --p-weight 0.5 --tokens-per-batch 2048 --draft-vocab 12288 \
  --eval-per-category 2 --eval-max-new 64
python -m core.train --out runs/gemma-3-270m-long --head-out runs/gemma-3-270m-long/head \
  --init runs/gemma-3-270m/head --extra-shards runs/gemma-3-270m/shards \
  --n-prompts 816 --n-text 0 --min-prompt-chars 1500 --batch 48 --max-prompt 1024 --new-tokens 144 \
  --sample-share 0.3 --seed 1 --epochs 1.5 --ttt-steps 2 --lr 5e-4 --p-weight 0.5 --tokens-per-batch 4096 \
  --max-len 1280 --draft-vocab 12288 --eval-per-category 2 --eval-max-new 64
python -m core.train --head-type eagle --out runs/g4-data --data-only \
  --n-prompts 14000 --n-text 0 --max-shards 84 --batch 96 --max-prompt 512 --new-tokens 160 \
  --sample-share 0.3 --prefill-share 0.0 --seed 4
python -m core.train --head-type eagle --out runs/gemma-3-270m-r3 --head-out runs/gemma-3-270m-r3/head \
  --init runs/gemma-3-270m-long/head --skip-data --extra-shards runs/g4-data/shards --n-prompts 1 --n-text 0 \
  --epochs 1 --ttt-steps 2 --lr 1e-3 --p-weight 0.5 --tokens-per-batch 4096 --max-len 768 --draft-vocab 12288 \
  --snapshots 3 --eval-per-category 2 --eval-max-new 64
python -m core.train.sources --out runs/de-sources/prompts.jsonl --n 1152
python -m core.train --head-type eagle --out runs/gemma-3-270m-de --head-out runs/gemma-3-270m-de/head \
  --init runs/gemma-3-270m-r3/head --prompts runs/de-sources/prompts.jsonl --n-prompts 1152 --n-text 384 \
  --max-text 512 --batch 96 --max-prompt 256 --new-tokens 160 --sample-share 0.3 --seed 5 --epochs 1 --ttt-steps 2 \
  --lr 5e-4 --p-weight 0.5 --tokens-per-batch 4096 --max-len 768 --draft-vocab 12288 --extend-vocab 4096 \
  --eval-per-category 2 --eval-max-new 64
python -m core.train --head-type eagle --out runs/g5-data --data-only \
  --n-prompts 14000 --n-text 0 --max-shards 11 --batch 96 --max-prompt 512 --new-tokens 160 \
  --sample-share 0.3 --prefill-share 0.0 --seed 6
python -m core.train --head-type eagle --out runs/gemma-3-270m-r5 --head-out runs/gemma-3-270m-r5/head \
  --init runs/gemma-3-270m-de/head --skip-data --extra-shards runs/g5-data/shards \
  --extra-shards runs/gemma-3-270m-de/shards --n-prompts 1 --n-text 0 --epochs 1 --ttt-steps 2 --lr 5e-4 \
  --p-weight 0.5 --tokens-per-batch 4096 --max-len 768 --draft-vocab 16384 --eval-per-category 2 --eval-max-new 64 \
  --seed 6
python -m core.train.sources --out runs/de6-sources/prompts.jsonl --n 576 --seed 7
python -m core.train --head-type eagle --out runs/g6-de --data-only --prompts runs/de6-sources/prompts.jsonl \
  --n-prompts 576 --n-text 0 --batch 96 --max-prompt 256 --new-tokens 160 --sample-share 0.3 --prefill-share 0.0 \
  --seed 7
python -m core.train --head-type eagle --out runs/g6-data --data-only \
  --n-prompts 14000 --n-text 0 --max-shards 40 --batch 96 --max-prompt 512 --new-tokens 160 \
  --sample-share 0.3 --prefill-share 0.0 --seed 7
python -m core.train --head-type eagle --out runs/gemma-3-270m-r6 --head-out static/heads/gemma-3-270m \
  --init runs/gemma-3-270m-r5/head --skip-data --extra-shards runs/g6-data/shards \
  --extra-shards runs/g6-de/shards --n-prompts 1 --n-text 0 --epochs 1 --ttt-steps 2 --lr 5e-4 \
  --p-weight 0.5 --tokens-per-batch 4096 --max-len 768 --draft-vocab 16384 --eval-per-category 2 --eval-max-new 64 \
  --seed 7
