"""Proving a `slow` verdict times each knob subset beside a reference step timed just before it,
not against the reference time stored earlier: a machine busier now than when the reference was
stored must not get a value cached as slow for the whole study."""

from __future__ import annotations

import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.verify.reference_knobs import REFERENCE_KNOBS
from hpo.verify.slow import SlowLimit
from hpo.verify.speed import prove_slow, time_knobs
from hpo.workloads.registry import create_workload

CPU = torch.device("cpu")


def test_a_reference_stored_on_a_quieter_machine_does_not_prove_a_value_slow():
    config = toy_config(Knobs(precision="fp32", attention="sdpa", optimizer="foreach"), d_model=128, seq_len=32)
    workload = create_workload(config.workload, config.workload_options)
    batch = next(workload.train_batches(config.training.batch_size, config.seed))
    reference_ms = time_knobs(workload, config, REFERENCE_KNOBS, CPU, batch).best_ms
    # As if the stored reference were timed while the machine was idle and every step now took 10x:
    # against it, sdpa and foreach (both about the reference's speed here) would each look 10x slow,
    # over the default limit of 5x.
    stored_when_quieter = SlowLimit(reference_ms=reference_ms / 10, ratio=5.0, batch_size=config.training.batch_size)
    assert prove_slow(workload, config, CPU, stored_when_quieter).verdict is None
