"""DeviceHealth keeps each step's loss on the device and folds them into a sticky first-bad-step
flag when its buffer fills and at each read: a NaN is found at its own step however many steps
(buffer folds) lie between it and the read, and the first of several is the one reported."""

from __future__ import annotations

import math

import pytest
import torch

from hpo.engine import DeviceHealth

CPU = torch.device("cpu")


def _run(steps: int, bad: dict[int, float], dtype=torch.float32) -> DeviceHealth:
    health = DeviceHealth(CPU)
    for step in range(steps):
        health.record(step, torch.tensor(bad.get(step, 1.0 + step), dtype=dtype))
    return health


@pytest.mark.parametrize("steps", [1, DeviceHealth.CAPACITY - 1, DeviceHealth.CAPACITY, 3 * DeviceHealth.CAPACITY + 5])
def test_every_loss_finite_reads_the_last_one(steps):
    reading = _run(steps, {}).read()
    assert reading.first_bad_step is None and reading.loss == 1.0 + steps - 1


@pytest.mark.parametrize("first", [0, DeviceHealth.CAPACITY - 1, DeviceHealth.CAPACITY, 2 * DeviceHealth.CAPACITY + 3])
def test_the_first_non_finite_step_is_reported_across_folds(first):
    reading = _run(3 * DeviceHealth.CAPACITY + 5, {first: math.nan, first + 7: math.inf}).read()
    assert reading.first_bad_step == first and math.isnan(reading.first_bad_loss)


def test_the_flag_is_sticky_across_reads_and_an_infinite_loss_counts():
    health = _run(10, {4: -math.inf})
    assert health.read().first_bad_step == 4
    health.record(10, torch.tensor(2.0))
    again = health.read()
    assert again.first_bad_step == 4 and again.first_bad_loss == -math.inf and again.loss == 2.0


def test_a_low_precision_loss_is_read_as_a_float():
    assert _run(3, {}, dtype=torch.bfloat16).read().loss == 3.0
