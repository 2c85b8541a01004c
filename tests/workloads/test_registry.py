"""The registry reads a built-in workload's options and metrics from its torch-free module, and the
workload class uses those same objects, so what `hpo validate` accepts is what the model gets."""

from __future__ import annotations

import importlib

import pytest

from hpo.errors import UserInputError
from hpo.workloads.catalog import (
    BUILTIN_OPTIONS,
    BUILTIN_WORKLOADS,
    NEEDS_USER_FILES,
    metrics_of,
    parse_options,
    resolve_factory,
)


@pytest.mark.parametrize("name", sorted(BUILTIN_WORKLOADS))
def test_the_workload_class_uses_its_options_module(name):
    options = importlib.import_module(BUILTIN_OPTIONS[name])
    factory = resolve_factory(name)
    assert factory.Options is options.Options
    assert factory.metrics == options.METRICS == metrics_of(name)
    assert set(metrics_of(name).values()) <= {"minimize", "maximize"}  # every built-in declares its directions
    if name not in NEEDS_USER_FILES:  # those need the user's own files
        assert isinstance(parse_options(name, {}), options.Options)


def test_options_of_a_user_workload_come_from_its_class():
    options = parse_options("toy_workloads:Toy", {"d_model": 16})
    assert type(options).__name__ == "ToyOptions" and options.d_model == 16
    assert metrics_of("toy_workloads:Toy") == resolve_factory("toy_workloads:Toy").metrics


def test_a_bad_option_of_a_builtin_names_the_key():
    with pytest.raises(UserInputError, match=r"workload\.widht: unknown option for this workload"):
        parse_options("causal_lm", {"widht": 3})
