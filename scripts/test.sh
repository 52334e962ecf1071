#!/usr/bin/env bash
# The README's test command: everything the suite needs on a fresh Debian machine, then the suite.
#   bash scripts/test.sh            # all tests except the GPU ones (pytest.ini deselects -m cuda)
#   bash scripts/test.sh -k hardening   # extra arguments go to pytest
# After the whole suite, the tests marked `isa` run again under oneDNN / ATen caps (AVX2, AVX-512 BF16, ATen's
# default kernels), so a test that holds only on this processor fails here (docs/ARCHITECTURE.md, section 6).
# Installs requirements.txt (what the app runs on) and requirements-test.txt (pytest, hypothesis, playwright) with
# pip, installs Debian's chromium for the browser test when it is missing (apt-get; as root, or through sudo when
# available), then runs pytest. Fails loudly when chromium cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
"$PY" -m pip install -q -r requirements.txt -r requirements-test.txt
CHROMIUM="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ] && ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
  echo "[test.sh] chromium not found: installing Debian's chromium (the browser test drives it)" >&2
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
fi
for flag in amx_bf16 avx512_bf16 avx512f avx2; do  # the processor, named by its widest matrix / vector unit
  if grep -qw "$flag" /proc/cpuinfo 2>/dev/null; then echo "[test.sh] processor flags include $flag" >&2; break; fi
done
"$PY" -m pytest -q "$@"
# The kernel-sensitive tests (marked `isa` in tests/conftest.py) again under the caps this processor can emulate:
# oneDNN limited to AVX2 or AVX-512 BF16, ATen's vector kernels at their portable default. Only for a whole-suite
# run (no arguments): `bash scripts/test.sh -k X` runs just what it names. ISA_CAPS="" skips them.
if [ $# -eq 0 ]; then
  for cap in ${ISA_CAPS-ONEDNN_MAX_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 ATEN_CPU_CAPABILITY=default}; do
    echo "[test.sh] kernel-sensitive tests with $cap" >&2
    env "$cap" "$PY" -m pytest -q -m isa -p no:cacheprovider
  done
fi
