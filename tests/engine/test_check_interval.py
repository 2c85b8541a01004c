"""`workload.check_every`: the steps between check boundaries is a setting of the file, validated,
carried into the trial's config, and written back by an export only when it is not the default."""

from __future__ import annotations

import pytest

from hpo.config.resolve import fixed_config
from hpo.config.space import parse_space
from hpo.errors import UserInputError


def _space(**workload) -> dict:
    return {
        "study": {"name": "check"},
        "workload": {"name": "toy_workloads:Toy", "max_steps": 10, **workload},
        "params": {"lr": 3e-3, "batch_size": 16},
        "systems": {"precision": "fp32", "attention": "eager", "optimizer": "forloop"},
    }


def test_the_check_interval_defaults_to_50_and_an_export_leaves_the_default_out():
    config = fixed_config(parse_space(_space(), source="test"))
    assert config.training.check_every == 50
    assert "check_every" not in config.to_dict()["workload"]


def test_a_check_interval_set_in_the_file_reaches_the_trainer_and_survives_an_export():
    config = fixed_config(parse_space(_space(check_every=7), source="test"))
    assert config.training.check_every == 7
    exported = config.to_dict()
    assert exported["workload"]["check_every"] == 7
    assert fixed_config(parse_space(exported, source="export")) == config


def test_a_check_interval_below_one_is_bad_input():
    with pytest.raises(UserInputError, match="check_every"):
        parse_space(_space(check_every=0), source="test")
