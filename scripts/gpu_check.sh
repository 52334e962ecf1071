#!/usr/bin/env bash
# The device check with pass criteria (scripts/gpu_check.py): exits non-zero unless fp32 T=0 gives 0 mismatches for
# every drafter on N real prompts, every bf16 divergence is a near tie, the sampled chi-square tests pass and tau lies
# within the stated band of the CPU's. On CUDA the cuda tests run first (tests/system/test_cuda.py, all of them).
#   bash scripts/gpu_check.sh                  # on a CUDA GPU
#   bash scripts/gpu_check.sh --device cpu     # the same checks on the CPU (what the GPU is held to)
# Extra arguments go to scripts/gpu_check.py (--n, --max-new-tokens, --model, --questions, --write-reference).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
DEVICE=cuda
for ((i = 1; i <= $#; i++)); do
  if [ "${!i}" = "--device" ]; then j=$((i + 1)); DEVICE="${!j}"; fi
done
mkdir -p artifacts/gpu_check
if [ "$DEVICE" != "cpu" ]; then
  "$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
  timeout 600 "$PY" -m pytest -q -m cuda tests/system/test_cuda.py 2>&1 | tee artifacts/gpu_check/pytest_cuda.log
  set -- --device "$DEVICE" "$@"
fi
exec "$PY" -m scripts.gpu_check "$@"
