# Sourced by scripts/demo, scripts/test and scripts/test-torch-newest: create or update a venv (.venv
# unless told another) with the project installed. torch is pinned in the same pip command as
# everything else, so pip never swaps it for another build (an unpinned torch pulls several GB of
# CUDA wheels).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TORCH_PIN="torch==2.13.0"
# The fast test layer (scripts/test --fast, scripts/test-torch-newest): markers in pyproject.toml.
FAST_LAYER="not slow and not subprocess and not postgres and not mysql and not browser and not gpu"
PYTHON="${PYTHON:-python3}"

# ensure_venv EXTRAS [VENV [PINS]]: VENV defaults to .venv, PINS (space-separated) to $TORCH_PIN.
ensure_venv() {
  local extras="$1" venv="${2:-$ROOT/.venv}" pins="${3:-$TORCH_PIN}"
  if [ ! -x "$venv/bin/python" ]; then
    echo "creating $venv" >&2
    "$PYTHON" -m venv "$venv"
  fi
  local stamp="$venv/.hpo-installed"
  local want
  want="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -c1-16) $extras"
  [ "$pins" = "$TORCH_PIN" ] || want="$want $pins"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "installing hpo[$extras] with $pins into $venv (about a minute the first time)" >&2
    # shellcheck disable=SC2086 # the pins are split on purpose
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $pins -e "$ROOT[$extras]" 2>&1 \
      | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
    "$venv/bin/python" -c "import torch, optuna, hpo" || { echo "install failed" >&2; exit 1; }
    echo "$want" > "$stamp"
  fi
}

ensure_chromium() {
  # Browser tests load hpo's pages in Debian's headless Chromium; they never skip, so install it.
  if command -v chromium >/dev/null 2>&1; then return 0; fi
  echo "installing chromium from Debian (once)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
}
