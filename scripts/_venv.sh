# Sourced by scripts/demo and scripts/test: create or update .venv with the project installed.
# torch is pinned in the same pip command as everything else, so pip never swaps it for another
# build (an unpinned torch pulls several GB of CUDA wheels).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TORCH_PIN="torch==2.13.0"
PYTHON="${PYTHON:-python3}"

ensure_venv() {
  local extras="$1"
  if [ ! -x "$ROOT/.venv/bin/python" ]; then
    echo "creating $ROOT/.venv" >&2
    "$PYTHON" -m venv "$ROOT/.venv"
  fi
  local stamp="$ROOT/.venv/.hpo-installed"
  local want
  want="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -c1-16) $extras"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "installing hpo[$extras] with $TORCH_PIN into .venv (about a minute the first time)" >&2
    "$ROOT/.venv/bin/python" -m pip install --quiet --disable-pip-version-check "$TORCH_PIN" -e "$ROOT[$extras]" 2>&1 \
      | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
    "$ROOT/.venv/bin/python" -c "import torch, optuna, hpo" || { echo "install failed" >&2; exit 1; }
    echo "$want" > "$stamp"
  fi
}

ensure_chromium() {
  # Browser tests load hpo's pages in Debian's headless Chromium; they never skip, so install it.
  if command -v chromium >/dev/null 2>&1; then return 0; fi
  echo "installing chromium from Debian (once)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
}
