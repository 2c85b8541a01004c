# Sourced by scripts/test: fetch Optuna's own storage tests for the installed Optuna, once per
# version, from its source distribution on PyPI (hpo commits none of Optuna's code). They land in
# tests/optuna_storages/storages_tests/ (ignored by git), where tests/optuna_storages/conftest.py
# runs them against hpo's storage on PostgreSQL; the sdist stays in .venv. Without network the
# suite is left out with a warning; in CI (HPO_REQUIRE_POSTGRES) its sentinel test then fails.
OPTUNA_SUITE_FILES="__init__.py test_storages.py test_heartbeat.py test_cached_storage.py
rdb_tests/__init__.py rdb_tests/test_storage.py rdb_tests/create_db.py"

ensure_optuna_storage_tests() {
  local dest="$ROOT/tests/optuna_storages/storages_tests" cache="$ROOT/.venv/optuna-sdist" version
  version="$("$ROOT/.venv/bin/python" -c 'import optuna; print(optuna.__version__)')"
  if [ "$(cat "$dest/.optuna-version" 2>/dev/null)" = "$version" ]; then return 0; fi
  if [ ! -f "$cache/optuna-$version.tar.gz" ]; then
    echo "fetching Optuna $version's storage tests (its sdist from PyPI, once)" >&2
    "$ROOT/.venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
      --no-binary :all: -d "$cache" "optuna==$version" >&2 ||
      { echo "warning: could not download optuna==$version's sdist: Optuna's storage suite is not run" >&2; return 0; }
  fi
  rm -rf "$dest"
  # shellcheck disable=SC2086 # the file list is split on purpose
  "$ROOT/.venv/bin/python" - "$cache/optuna-$version.tar.gz" "$dest" "$version" $OPTUNA_SUITE_FILES <<'PY'
import pathlib, sys, tarfile

sdist, dest, version, *files = sys.argv[1:]
dest = pathlib.Path(dest)
with tarfile.open(sdist) as tar:
    for name in files:
        member = tar.extractfile(f"optuna-{version}/tests/storages_tests/{name}")
        if member is None:
            sys.exit(f"optuna-{version}'s sdist has no tests/storages_tests/{name}")
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(member.read())
(dest / ".optuna-version").write_text(version)
PY
}
