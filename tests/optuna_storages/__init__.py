"""Optuna's own storage tests, run on hpo's storage (see conftest.py): a package, so its conftest is
not the module `conftest` that other tests import from."""
