"""Proving a `slow` verdict times each knob subset beside a reference step timed just before it,
not against the reference time stored earlier: a machine busier now than when the reference was
stored must not get a value cached as slow for the whole study."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch
from conftest import judged_despite_noise, slow_foreach_adamw, toy_config

from hpo.config.trial import Knobs
from hpo.trial import execute
from hpo.verdicts import Kind
from hpo.verify.fault import REFERENCE_KNOBS
from hpo.verify.stored import MemoryVerdicts, reference_key
from hpo.verify.timing import SlowLimit, prove_slow, time_knobs
from hpo.workloads.catalog import create_workload

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


@pytest.mark.slow
def test_a_reference_too_noisy_to_judge_gives_no_slow_verdict_and_the_trial_trains(monkeypatch):
    """Fault: the trial's foreach AdamW is truly slow (1.5 s a step), but every step of the
    reference's for-loop AdamW takes 10 ms longer than the one before, so its own steps never
    agree: nothing can be judged against it. No verdict; the trial trains and says why."""
    original, calls = torch.optim.AdamW.step, []

    def step(self, *args, **kwargs):
        if self.param_groups[0].get("foreach"):
            time.sleep(1.5)
        else:
            calls.append(None)
            time.sleep(0.01 * len(calls))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    config = toy_config(Knobs(precision="fp32", attention="eager", optimizer="foreach"), max_steps=4, eval_every=4)
    config, verdicts = dataclasses.replace(config, skip_slow=True), MemoryVerdicts()
    verdicts.put(reference_key(config, CPU), {"step_ms": 1.0})  # the trial's first steady steps are over the limit
    outcome = execute(config, verdicts)
    assert str(outcome.verdict) == "ok" and outcome.attrs["steps_run"] == 4
    assert (outcome.attrs.get("slow_not_judged") or "").startswith("reference spread "), {
        k: v for k, v in outcome.attrs.items() if "slow" in k
    }
    assert "slow_not_confirmed" not in outcome.attrs
    assert not [r for r in verdicts.records.values() if "verdict" in r and not r["verdict"].startswith("ok")]


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_a_trial_records_the_slowdown_its_verdict_states(monkeypatch):
    """Fault: foreach AdamW sleeps 1 s a step. The stored reference time is 1 ms, so the trial's
    first steps read hundreds of times the limit; the verdict is the proof's, timed beside the
    reference, and the trial's stored `slowdown` is that same number, not the first steps' ratio
    to the stored time (a Mamba trial said 6.3x in its verdict and 13.6 in its record)."""
    slow_foreach_adamw(monkeypatch, 1.0)
    config = toy_config(Knobs(precision="fp32", attention="eager", optimizer="foreach"), max_steps=4, eval_every=4)
    config = dataclasses.replace(config, skip_slow=True)

    def trial():
        verdicts = MemoryVerdicts()
        verdicts.put(reference_key(config, CPU), {"step_ms": 1.0})
        return execute(config, verdicts)

    outcome = judged_despite_noise(trial)
    assert outcome.verdict.kind is Kind.SLOW, outcome.verdict
    stated = float(outcome.verdict.detail.split("x ", 1)[0].removeprefix("at least "))
    assert round(outcome.attrs["slowdown"], 1) == stated, (outcome.attrs["slowdown"], outcome.verdict.detail)
    assert outcome.attrs["slowdown"] < 1000, outcome.attrs["slowdown"]  # not 1000+ ms over the stored 1 ms
