"""Optuna's storage suite is here to run against hpo's storage, for the installed Optuna: CI
(HPO_REQUIRE_POSTGRES) fails without it rather than passing on hpo's tests alone."""

from __future__ import annotations

import os
from pathlib import Path

import optuna
import pytest

pytestmark = pytest.mark.postgres  # what runs the suite; the fast layer leaves both out

SUITE = Path(__file__).parent / "storages_tests"


def test_optuna_storage_suite_is_fetched_for_the_installed_optuna():
    stamp = SUITE / ".optuna-version"
    fetched = stamp.read_text() if stamp.is_file() else None
    if fetched != optuna.__version__:
        message = (
            f"Optuna's storage tests for optuna {optuna.__version__} are not in {SUITE} (found: {fetched}); "
            "scripts/test fetches them from PyPI (scripts/_optuna_suite.sh)"
        )
        if os.environ.get("HPO_REQUIRE_POSTGRES"):
            pytest.fail(message)
        pytest.skip(message)
    assert sorted(p.name for p in SUITE.glob("test_*.py")) == ["test_cached_storage.py", "test_heartbeat.py", "test_storages.py"]
    assert (SUITE / "rdb_tests" / "test_storage.py").is_file()
