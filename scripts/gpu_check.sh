#!/usr/bin/env bash
# GPU check, a few minutes on one CUDA GPU: the cuda tests (greedy and sampled EAGLE-2 on CUDA, the same seeded
# tokens on CPU and CUDA, the app's handler on a GPU), then a short bench of the packaged Gemma 3 270M on cuda
# (3 Spec-Bench prompts, 64 new tokens, greedy and T=1). Outputs go to artifacts/gpu/.
#   bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
mkdir -p artifacts/gpu
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
timeout 300 "$PY" -m pytest -q -m cuda tests/test_cuda.py 2>&1 | tee artifacts/gpu/pytest_cuda.log
Q=""
for f in ../shared/data/spec_bench_questions.jsonl shared/data/spec_bench_questions.jsonl; do [ -f "$f" ] && Q="$f" && break; done
if [ -n "$Q" ]; then
  for T in 0 1; do
    timeout 240 "$PY" -m core.bench --questions "$Q" --limit 3 --max-new-tokens 64 --methods hf,baseline,eagle2 \
      --temperature $T --device cuda --dtype bf16 --tree 16,6,8 --json artifacts/gpu/bench_t${T}.json \
      2>&1 | tee artifacts/gpu/bench_t${T}.log
  done
else
  echo "[gpu_check] spec_bench_questions.jsonl not found: bench skipped" >&2
fi
