#!/usr/bin/env bash
# The README's test command: everything the suite needs on a fresh Debian machine, then the suite.
#   bash scripts/test.sh            # all tests except the GPU ones (pytest.ini deselects -m cuda)
#   bash scripts/test.sh -k hardening   # extra arguments go to pytest
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
exec "$PY" -m pytest -q "$@"
