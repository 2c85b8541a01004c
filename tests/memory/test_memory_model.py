"""The peak model, the CUDA default limit, `batch_size: auto` in a space file, and the sampler
told that a (combination, batch) does not fit."""

from __future__ import annotations

import math

import optuna
import pytest
import torch
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from hpo.config.params import AutoBatch
from hpo.config.resolve import fixed_config
from hpo.config.space import parse_space
from hpo.errors import UserInputError
from hpo.hardware._memory_model import GB, default_limit_bytes, fit_peaks, limit_bytes
from hpo.study._avoid import AvoidKnownFailures, known_bad_parts

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_the_fit_is_fixed_plus_per_sample_and_gives_the_largest_batch_that_fits():
    model = fit_peaks([(8, 10 * GB), (16, 12 * GB)])
    assert model.per_sample_bytes == GB / 4 and model.fixed_bytes == 8 * GB
    assert model.predict(64) == 24 * GB
    assert model.largest_fitting(20 * GB, 1024) == 48
    assert model.largest_fitting(20 * GB, 1024, multiple_of=10) == 40
    assert model.largest_fitting(20 * GB, 32) == 32
    assert model.largest_fitting(7 * GB, 1024) == 0


def test_a_peak_that_falls_with_the_batch_never_predicts_below_what_was_measured():
    model = fit_peaks([(4, 5 * GB), (8, 4 * GB)])
    assert model.per_sample_bytes == 0 and model.predict(1024) == 5 * GB


def test_cuda_defaults_to_its_total_less_the_margin_and_a_cpu_to_none(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * GB, 80 * GB))
    assert default_limit_bytes(torch.device("cuda")) == 76 * GB  # 5% of 80 GB
    assert limit_bytes(torch.device("cuda"), 24.0) == 24 * GB
    assert limit_bytes(torch.device("cpu"), None) is None
    assert limit_bytes(torch.device("cpu"), 2.0) == 2 * GB


SPACE = {"workload": {"name": "toy_workloads:Toy"}, "study": {"memory_limit_gb": 3.0}}


def test_batch_size_auto_reads_writes_and_refuses_bad_options():
    space = parse_space({**SPACE, "params": {"batch_size": {"auto": {"max": 256, "multiple_of": 8}}}}, source="t")
    config = fixed_config(space)
    assert config.batch_auto == AutoBatch(max=256, multiple_of=8) and config.training.batch_size == 8
    exported = config.to_dict()
    assert exported["params"]["batch_size"] == {"auto": {"max": 256, "multiple_of": 8}}
    assert exported["study"]["memory_limit_gb"] == 3.0
    assert fixed_config(parse_space(exported, source="again")) == config
    assert fixed_config(parse_space({**SPACE, "params": {"batch_size": "auto"}}, source="t")).batch_auto == AutoBatch()
    with pytest.raises(UserInputError, match=r"params.batch_size.auto.max must be an integer >= 1, got 0"):
        parse_space({**SPACE, "params": {"batch_size": {"auto": {"max": 0}}}}, source="t")
    with pytest.raises(UserInputError, match=r"multiple_of <= max must hold"):
        parse_space({**SPACE, "params": {"batch_size": {"auto": {"max": 4, "multiple_of": 8}}}}, source="t")


def _oom_study(batch_distribution) -> optuna.Study:
    study = optuna.create_study(sampler=AvoidKnownFailures(optuna.samplers.RandomSampler(seed=0), seed=0))
    dist = {"batch_size": batch_distribution, "grad_checkpointing": CategoricalDistribution([False, True])}
    implicates = [["attention", "sdpa"], ["batch_size", 64], ["grad_checkpointing", False], ["precision", "fp32"]]
    study.add_trial(
        create_trial(
            state=TrialState.COMPLETE,
            value=math.inf,
            params={"batch_size": 64, "grad_checkpointing": False},
            distributions=dist,
            user_attrs={
                "verdict": "oom: predicted 31.2 GB > limit 24 GB at batch 64 (fits up to 48)",
                "verdict_implicates": implicates,
            },
        )
    )
    return study


@pytest.mark.parametrize(
    "batches", [CategoricalDistribution([16, 32, 64, 128]), IntDistribution(16, 128, step=16)], ids=["choices", "range"]
)
def test_an_oom_at_a_batch_is_avoided_at_it_and_above_with_its_searched_knobs(batches):
    study = _oom_study(batches)
    assert known_bad_parts(study) == {(("batch_size>=", 64), ("grad_checkpointing", False))}
    proposed = []
    for _ in range(40):
        trial = study.ask({"batch_size": batches, "grad_checkpointing": CategoricalDistribution([False, True])})
        proposed.append((trial.params["batch_size"], trial.params["grad_checkpointing"]))
        study.tell(trial, 1.0)
    assert not [p for p in proposed if p[0] >= 64 and p[1] is False]
    assert any(p[0] >= 64 for p in proposed) and any(p[1] is False for p in proposed)  # each alone still proposed
