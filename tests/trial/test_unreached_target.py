"""A target never reached is the worst value of its objective, +inf to minimize and -inf to
maximize, never 0 (which would be the best time to target there is) and never an error. The slow
tests see it end to end; this one sees the two functions that make it, in a fraction of a second."""

from __future__ import annotations

import dataclasses
import math

import torch
from conftest import toy_config

from hpo.config.trial import Target
from hpo.trial._speed_record import objective_values, speed_attrs
from hpo.trial._trainer import TrainResult
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")


def _result(time_to_target_s: float | None) -> TrainResult:
    return TrainResult(
        metrics={"val_loss": 1.5}, knobs_observed={}, step_time_ms=10.0, train_samples_per_s=100.0, peak_mem_mb=1.0,
        n_params=10, steps=6, train_s=0.6, time_to_target_s=time_to_target_s,
    )  # fmt: skip


def _config(objectives: tuple[str, ...], directions: tuple[str, ...]):
    config = toy_config()
    training = dataclasses.replace(config.training, target=Target("val_loss", 0.0))
    return dataclasses.replace(config, training=training, objectives=objectives, directions=directions)


def test_a_target_never_reached_is_the_worst_value_of_its_objective():
    config = _config(("time_to_target_s", "val_loss"), ("minimize", "minimize"))
    workload = create_workload(config.workload, config.workload_options)
    workload.bind_training(config.training.params())
    attrs = speed_attrs(workload, config, CPU, _result(None), MemoryVerdicts())
    assert attrs["target_reached"] is False and attrs["time_to_target_s"] is None
    assert objective_values(config, _result(None), attrs) == [math.inf, 1.5]
    reached = speed_attrs(workload, config, CPU, _result(0.25), MemoryVerdicts())
    assert reached["target_reached"] is True and objective_values(config, _result(0.25), reached) == [0.25, 1.5]


def test_a_systems_objective_a_trial_could_not_produce_is_minus_inf_to_maximize():
    config = _config(("mfu", "time_to_target_s"), ("maximize", "minimize"))
    attrs = {"mfu": None, "time_to_target_s": None, "target_reached": False}  # no known peak, target missed
    assert objective_values(config, _result(None), attrs) == [-math.inf, math.inf]
