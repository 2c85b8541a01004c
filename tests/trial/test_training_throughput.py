"""The throughput a trial records and a study optimizes is samples trained over training time
(`train_samples_per_s`), every wait for a batch included; the median step's speed is kept beside it
(`steady_samples_per_s`); and `data_wait_share` is the wait over that same training time.

The waits and the step's work are injected as sleeps of known length, so the expected figures
follow from the recorded `train_s` alone, whatever else the machine is doing."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch
from conftest import toy_config
from loader_workloads import SleepingSamples

from hpo.engine import AssembledModel
from hpo.trial import _trainer as trainer
from hpo.trial._step_tally import StepTally
from hpo.workloads.catalog import create_workload

BATCH = 8  # samples of SleepingSamples.delay_s (25 ms) each: 0.2 s a batch
STEP_S = 0.05  # each step's work, beside its real compute (a few ms idle, more on a busy machine)
EVAL_S = 0.6  # each evaluation: with two of them, about as long as the training itself


def test_a_wait_that_only_some_steps_pay_lowers_the_trained_speed_not_the_steady_one():
    tally = StepTally(evidence_at=0)
    for step in range(10):
        tally.ended(step, 8)
    # A worker starting again at an epoch's first step: one wait of 1 s among steps of 10 ms.
    tally.add([0.01] * 5 + [1.01] + [0.01] * 4)
    assert tally.steady_samples_per_s() == pytest.approx(8 / 0.01)
    assert tally.train_samples_per_s() == pytest.approx(9 * 8 / (8 * 0.01 + 1.01))


def test_no_training_step_timed_is_no_speed_rather_than_a_division_by_zero():
    tally = StepTally(evidence_at=0)
    tally.ended(0, 8)
    tally.add([0.5])  # the profiled step only: not training time
    assert tally.train_s == 0 and tally.train_samples_per_s() is None and tally.steady_samples_per_s() is None
    tally.ended(1, 8)
    tally.add([0.0])  # a clock too coarse to see the step
    assert tally.train_samples_per_s() is None and tally.steady_samples_per_s() is None


def _slow_trial(monkeypatch) -> trainer.TrainResult:
    real_step, real_evaluate = trainer.run_step, AssembledModel.evaluate

    def step_with_known_work(*args, **kwargs):
        time.sleep(STEP_S)
        return real_step(*args, **kwargs)

    def slow_evaluate(self):
        time.sleep(EVAL_S)
        return real_evaluate(self)

    monkeypatch.setattr(SleepingSamples, "spent", [])
    monkeypatch.setattr(trainer, "run_step", step_with_known_work)
    monkeypatch.setattr(AssembledModel, "evaluate", slow_evaluate)
    config = toy_config(max_steps=6, eval_every=3)
    config = dataclasses.replace(
        config,
        workload="loader_workloads:SlowSamplesToy",
        workload_options={"n_blocks": 1},
        training=dataclasses.replace(config.training, batch_size=BATCH),
    )
    workload = create_workload(config.workload, config.workload_options)
    assembled = AssembledModel(workload, config.knobs, config.training, torch.device("cpu"))
    return trainer.train(assembled, config)


def test_data_wait_share_is_the_wait_over_the_training_time(monkeypatch):
    """Dividing the wait by anything but `train_s` fails this: by the steps' time without their
    waits the share is about 1, by the wall time with the evaluations about a quarter."""
    result = _slow_trial(monkeypatch)
    # The samples' real time (sleeps overshoot on a busy machine), but the first batch's: the
    # profiled step's wait and time count in neither.
    assert len(SleepingSamples.spent) == result.steps * BATCH
    injected = sum(SleepingSamples.spent[BATCH:]) / result.train_s
    # About 0.8 idle; a busy machine's slower compute lowers it (0.36 at 0.3 s more a step). Dividing
    # by `train_s - wait` gives injected / (1 - injected): 1.0 and 0.56 there, past the bound.
    # The measured wait holds the samples' time, plus the loader's own (collating 8 tiny samples).
    assert injected - 0.01 <= result.data_wait_share <= 1.15 * injected, (result.data_wait_share, injected)
    assert result.eval_s >= 2 * EVAL_S


def test_the_recorded_throughput_is_samples_trained_over_training_time(monkeypatch):
    result = _slow_trial(monkeypatch)
    assert result.train_samples_per_s == pytest.approx((result.steps - 1) * BATCH / result.train_s)
    # The median step holds its wait too (timed from fetching the batch), but not the evaluations.
    assert result.steady_samples_per_s == pytest.approx(BATCH / (result.step_time_ms / 1000))
