"""The reference's step time: timed until a step ran steady, and on CPU with its memory touched
beforehand, so that its first full-batch step does not fault that memory in while it is timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpo.hardware import _allocator as allocator
from hpo.verify.timing import _reference_time as reference
from hpo.verify.timing._reference_time import MAX_STEPS, MIN_TIMED_S, full_step_bytes, time_until_steady

TESTS = Path(__file__).resolve().parents[1]


def _steps(*timings):
    """A stand-in step returning the given (seconds, page faults) in turn."""
    pending = list(timings)
    return lambda: pending.pop(0)


def _faults_under(limit):
    return lambda index, seconds, faults: faults < limit


def test_a_long_steady_first_step_is_timed_once():
    assert time_until_steady(_steps((0.5, 10), (0.4, 0)), _faults_under(100)) == [(0.5, 10)]


def test_a_step_that_faulted_its_memory_in_is_timed_again():
    timed = time_until_steady(_steps((0.9, 60_000), (0.5, 0), (0.4, 0)), _faults_under(100))
    assert timed == [(0.9, 60_000), (0.5, 0)]


def test_short_steps_are_repeated_until_enough_was_timed_and_never_more_than_max_steps():
    short = MIN_TIMED_S / 2.5  # two fall short of MIN_TIMED_S, three reach it
    timed = time_until_steady(_steps(*[(short, 0)] * MAX_STEPS), _faults_under(100))
    assert len(timed) == 3
    never_steady = time_until_steady(_steps(*[(1.0, 10**6)] * (MAX_STEPS + 1)), _faults_under(100))
    assert len(never_steady) == MAX_STEPS


@pytest.mark.parametrize("prefault", [None, allocator.Prefault(nbytes=2**20, seconds=1e-3, faults=3)])
def test_without_a_measured_prefault_the_first_step_is_never_the_steady_one(prefault):
    steady = reference._steadiness(prefault)  # none, or one whose memory was resident already
    assert not steady(0, 1.0, 0) and steady(1, 1.0, 10**6)
    assert time_until_steady(_steps((0.5, 0), (0.5, 0)), steady) == [(0.5, 0), (0.5, 0)]


def test_a_step_is_steady_when_its_faults_cost_under_the_share_of_its_time():
    measured = allocator.Prefault(nbytes=2**30, seconds=0.262144, faults=262_144)  # 1 us a fault
    steady = reference._steadiness(measured)
    assert steady(0, 0.5, 10_000)  # 10 ms of 500 ms faulting
    assert not steady(0, 0.5, 60_000)  # 60 ms of 500 ms


def test_the_prefault_covers_the_optimizer_state_and_the_samples_the_compared_step_lacked():
    mb = 2**20
    # 10 MB of parameters; the compared step (4 samples) added their gradients and 8 MB of activations.
    assert full_step_bytes(10 * mb, 18 * mb, batch_size=16, compared_size=4) == int(1.5 * (20 * mb + 12 * 2 * mb))
    # Compared on the full batch (a compiled model): its activations are resident already.
    assert full_step_bytes(10 * mb, 18 * mb, batch_size=16, compared_size=16) == int(1.5 * 20 * mb)


# Builds a Toy reference large enough to allocate ~100 MB a step, compares it on 4 samples as the
# probe does, then times it; prints each timed step's page faults and the prefault's size.
_TIMING = """
import json, sys, torch
from hpo.config.trial import TrainingConfig
from hpo.engine._assembly import AssembledModel
from hpo.engine._step import run_step
from hpo.hardware import _allocator as allocator
from hpo.hardware._memory import resident_bytes
from hpo.verify.timing import _reference_time as reference
from hpo.verify.fault._reference_knobs import REFERENCE_KNOBS
from hpo.workloads.catalog import create_workload

allocator.keep_freed_memory()
if sys.argv[1] == "no-prefault":
    reference.prefault_heap = lambda nbytes: None
workload = create_workload("toy_workloads:Toy", {"d_model": 256, "n_heads": 4, "seq_len": 128, "n_blocks": 2})
training = TrainingConfig(batch_size=64, lr=1e-3)
model = AssembledModel(workload, REFERENCE_KNOBS, training, torch.device("cpu"))
model.model.eval()
batches = workload.train_batches(64, 0)
batch, compared = next(batches), {k: v[:4] for k, v in next(batches).items()}
before = resident_bytes()
run_step(model, compared, 0, update=False)
timing = reference.time_reference(model, batch, resident_bytes() - before, 4)
print(json.dumps(timing.record()))
"""


def _timing(mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _TIMING, mode], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(allocator._glibc() is None, reason="only glibc keeps freed memory (mallopt)")
def test_touching_the_memory_first_takes_the_page_faults_out_of_the_timed_step():
    cold, prefaulted = _timing("no-prefault"), _timing("prefault")
    assert cold["prefault_mb"] is None and prefaulted["prefault_mb"] > 50, prefaulted
    first_cold, first_prefaulted = cold["timed_steps_faults"][0], prefaulted["timed_steps_faults"][0]
    # Cold, the first timed step faults the step's memory in; prefaulted, almost none is left.
    assert first_cold > 1_000, cold
    assert first_prefaulted < first_cold / 10, prefaulted
    assert prefaulted["step_ms"] == min(prefaulted["timed_steps_ms"])


def test_every_reference_step_run_is_a_timed_one(monkeypatch):
    """The study's first probe pays for each reference step it runs: none is run untimed (the
    steadiness rule keeps a cold first step from ending the timing), so the steps run are the
    steps in the record."""
    import torch

    from hpo.config.trial import TrainingConfig
    from hpo.engine import AssembledModel
    from hpo.verify.fault import REFERENCE_KNOBS
    from hpo.workloads.catalog import create_workload

    run = []
    timed_step = reference.timed_step
    monkeypatch.setattr(reference, "timed_step", lambda *args: run.append(args[2]) or timed_step(*args))
    workload = create_workload("toy_workloads:Toy", {"d_model": 32, "n_heads": 2, "seq_len": 16, "n_blocks": 1})
    model = AssembledModel(workload, REFERENCE_KNOBS, TrainingConfig(batch_size=8, lr=1e-3), torch.device("cpu"))
    timing = reference.time_reference(model, next(workload.train_batches(8, 0)), 2**20, 4)
    assert run == list(range(len(timing.steps_ms))) and 1 <= len(run) <= MAX_STEPS, (run, timing)
