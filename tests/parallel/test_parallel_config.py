"""`systems.parallel` in a search space: searched like a knob, carried to the trial's config, and
written back by an export; and the hash every rank checks its config against."""

from __future__ import annotations

import pytest
from parallel_ranks import two_rank_config

from hpo.config.resolve import fixed_config, representative_config, searched_keys
from hpo.config.space import parse_space
from hpo.config.trial import ParallelSettings
from hpo.errors import UserInputError
from hpo.parallel.agreement import config_hash, differences


def space(parallel) -> dict:
    return {"workload": {"name": "causal_lm"}, "systems": {"parallel": parallel}}


def test_strategy_and_its_knobs_are_searched_like_the_other_knobs():
    parsed = parse_space(space({"processes": 2, "strategy": ["ddp", "fsdp"], "bucket_cap_mb": [1, 25]}), "s.yaml")
    assert searched_keys(parsed) == {
        "systems.parallel.strategy": ["ddp", "fsdp"],
        "systems.parallel.bucket_cap_mb": [1.0, 25.0],
    }
    assert representative_config(parsed).parallel == ParallelSettings(processes=2, strategy="ddp", bucket_cap_mb=1.0)


def test_a_space_without_parallel_runs_one_process():
    assert fixed_config(parse_space({"workload": {"name": "causal_lm"}}, "s.yaml")).parallel is None


def test_an_exported_parallel_config_reads_back_the_same():
    config = two_rank_config("fsdp", reshard_after_forward=False)
    assert fixed_config(parse_space(config.to_dict(), "export.yaml")) == config


@pytest.mark.parametrize(
    ("parallel", "message"),
    [
        ({"processes": 0}, "systems.parallel.processes: Input should be greater than or equal to 1"),
        ({"strategy": "zero3"}, "systems.parallel.strategy"),
        ({"strategy": []}, "a searched knob needs at least one value"),
    ],
)
def test_an_impossible_parallel_key_is_refused_naming_it(parallel, message):
    with pytest.raises(UserInputError, match=message):
        parse_space(space(parallel), "s.yaml")


def test_the_config_hash_sees_a_changed_learning_rate_and_names_it():
    ours, theirs = two_rank_config().to_dict(), two_rank_config().to_dict()
    assert config_hash(ours) == config_hash(theirs)
    theirs["params"]["lr"] = 2e-3
    assert config_hash(ours) != config_hash(theirs)
    assert differences(theirs, ours) == ["params.lr 0.002 against rank 0's 0.001"]
