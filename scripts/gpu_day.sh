#!/usr/bin/env bash
# One GPU command for the day a GPU is lent (docs/trust.md §5): the cuda tests on tiny models, the real
# architectures timed with random weights, and the speedup each shipped head's tau would give there.
#   bash scripts/gpu_day.sh                     # on the GPU machine: report under $OUT (or --out DIR)
#   bash scripts/gpu_day.sh --device cpu        # the dry run: reduced sizes, about a minute
# Wheels carried in .whl/ (transformers at the pin in requirements.txt) are installed into /tmp/site first when the
# installed transformers is not the pinned one; without them the installed one is used and the report says which.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
PIN="$(sed -n 's/^transformers==//p' requirements.txt)"
HAVE="$("$PY" -c 'import transformers; print(transformers.__version__)' 2>/dev/null || echo none)"
if [ "$HAVE" != "$PIN" ] && compgen -G ".whl/*.whl" >/dev/null; then
  echo "[gpu_day] transformers $HAVE installed, $PIN pinned: installing the carried wheels (.whl/)"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
exec "$PY" scripts/gpu_day.py "$@"
