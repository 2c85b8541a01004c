"""The fault matrix: each fault injected into a real trial, and what it becomes. A failure becomes a
knob verdict only when the knobs are proven at fault; everything else is an error that ends FAIL
with its traceback, caches nothing and teaches the sampler nothing.

Executor level here (each case in about a second); through a study, in-process and in trial
processes, on SQLite and PostgreSQL in `test_fault_matrix_in_studies.py`.
"""

from __future__ import annotations

import pytest
import torch
from builtin_tiny import TINY_OPTIONS, builtin_config
from conftest import toy_config
from contracts.fakes.cudnn_rnn import patched_lstm

from hpo.config.trial import Knobs, TrialConfig
from hpo.errors import TrialError
from hpo.trial import execute
from hpo.verdicts import Kind
from hpo.verify.stored import VERDICT_PREFIX, MemoryVerdicts, speed_key, verdict_key

CPU = torch.device("cpu")
FAULTY = "fault_workloads:Faulty"
TRIAL_KNOBS = Knobs(precision="fp32", attention="sdpa", optimizer="fused")


def faulty(knobs: Knobs = TRIAL_KNOBS, **options) -> TrialConfig:
    config = toy_config(knobs, max_steps=4, eval_every=2, **options)
    return type(config)(**{**config.__dict__, "workload": FAULTY})


def non_ok_records(verdicts: MemoryVerdicts) -> dict:
    return {k: r for k, r in verdicts.records.items() if "verdict" in r and r["verdict"] != "ok"}


@pytest.mark.parametrize(
    ("options", "raised_in", "cached_ok_probe"),
    [
        ({"fault": "loss_in_probe"}, "training_loss", False),  # the reference's step fails: never the knobs'
        ({"fault": "loss_in_training"}, "training_loss", True),
        ({"fault": "data", "at_batch": 0}, "train_batches", False),  # the probe's data fetch
        ({"fault": "data", "at_batch": 3}, "train_batches", True),  # mid-training
    ],
    ids=["raise-in-loss-probe", "raise-in-loss-training", "raise-in-data-probe", "raise-in-data-training"],
)
def test_a_workload_bug_is_an_error_with_its_traceback_and_no_verdict(options, raised_in, cached_ok_probe):
    config, verdicts = faulty(**options), MemoryVerdicts()
    with pytest.raises(TrialError) as raised:
        execute(config, verdicts)
    error = raised.value
    assert error.verdict.kind is Kind.ERROR and not error.verdict.implicates
    assert raised_in in error.attrs["error_traceback"] and "Traceback (most recent call last)" in error.attrs["error_traceback"]
    assert error.attrs["knobs_requested"] == TRIAL_KNOBS.as_dict()  # what it recorded up to then is kept
    assert non_ok_records(verdicts) == {}  # nothing cached against the knobs
    key, _ = verdict_key(config, CPU)
    assert (key in verdicts.records) is cached_ok_probe  # a probe that passed is a fact about the knobs; a failed one is not
    # The same knobs train in the next trial once the bug is gone.
    assert execute(faulty(), verdicts).ok


def test_an_unknown_failure_under_one_value_implicates_exactly_that_value():
    """bf16 with SDPA and fused AdamW fails in a way no upstream contract names: the differential
    run tries each value alone from the reference, and only bf16 fails alone."""
    knobs = Knobs(precision="bf16", attention="sdpa", optimizer="fused")
    config, verdicts = faulty(knobs, fault="under_bf16"), MemoryVerdicts()
    outcome = execute(config, verdicts)
    assert outcome.verdict.kind is Kind.INCOMPATIBLE, outcome.verdict
    assert outcome.verdict.implicates == (("precision", "bf16"),)
    assert "my_fused_block: refused its input" in outcome.verdict.detail
    assert outcome.attrs["probe_blame"] == "differential"
    key, _ = verdict_key(config, CPU)
    assert verdicts.records[key]["implicates"] == [["precision", "bf16"]]
    # fp32 with the same SDPA and fused optimizer is not blamed, and trains.
    assert execute(faulty(fault="under_bf16"), verdicts).ok


def test_a_transient_error_in_the_probe_is_an_error_and_passes_on_retry(tmp_path):
    """Call 0 is the reference's step, call 1 the trial's: it fails once, then every try of the
    differential run passes, so nothing is proven and nothing is cached."""
    config = faulty(fault="transient", at_call=1, once=str(tmp_path / "failed-once"))
    verdicts = MemoryVerdicts()
    with pytest.raises(TrialError) as raised:
        execute(config, verdicts)
    assert "ConnectionResetError" in str(raised.value.verdict)
    assert non_ok_records(verdicts) == {} and verdict_key(config, CPU)[0] not in verdicts.records
    assert execute(config, verdicts).ok  # the retry, same config


def test_nan_in_training_is_diverged_not_a_knob_verdict():
    config, verdicts = faulty(nan_at_step=1), MemoryVerdicts()
    outcome = execute(config, verdicts)
    assert outcome.verdict.kind is Kind.DIVERGED and not outcome.verdict.implicates
    assert non_ok_records(verdicts) == {}


def test_a_reused_verdict_records_nothing_as_observed():
    knobs = Knobs(precision="bf16", attention="sdpa", optimizer="fused")
    verdicts = MemoryVerdicts()
    first = execute(faulty(knobs, fault="under_bf16"), verdicts)
    second = execute(faulty(knobs, fault="under_bf16"), verdicts)
    assert str(second.verdict) == str(first.verdict)
    assert second.attrs["verdict_from_cache"] is True and second.attrs["knobs_observed"] == {}


def test_verdict_facts_never_overwrite_each_other(tmp_path):
    """A probe verdict and a speed fact live under their own keys, each written only if absent, in
    a process's store and in a study's (Optuna's table, as study user attrs under the prefix)."""
    import optuna

    from hpo.verify.stored import StudyVerdicts

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'study.db'}")
    for verdicts in (MemoryVerdicts(), StudyVerdicts(study)):
        assert verdicts.add("k", {"verdict": "ok"}) and not verdicts.add("k", {"verdict": "slow: x"})
        assert verdicts.add(speed_key("k", 8), {"verdict": "slow: 9.0x"})
        assert verdicts.get("k") == {"verdict": "ok"}
        assert verdicts.all() == {"k": {"verdict": "ok"}, speed_key("k", 8): {"verdict": "slow: 9.0x"}}
    assert speed_key("k", 8) != speed_key("k", 128) != "k"
    # The study's store keeps each fact under the prefix the dashboard and its readers look for.
    assert study.user_attrs == {
        VERDICT_PREFIX + "k": {"verdict": "ok"},
        VERDICT_PREFIX + speed_key("k", 8): {"verdict": "slow: 9.0x"},
    }


@pytest.mark.parametrize("name", sorted(TINY_OPTIONS))
def test_a_module_whose_backward_needs_train_mode_trains_in_every_builtin_workload(name, tmp_path, monkeypatch):
    """cuDNN's RNN refuses a backward whose forward ran in eval mode (on an H200 the CNN-LSTM's
    probe crashed 18 of 18 combinations): with an LSTM as strict, every built-in workload's trial
    is probed and trains, and nothing is cached against its knobs."""
    patched_lstm(monkeypatch)
    config, verdicts = builtin_config(name, tmp_path, TRIAL_KNOBS), MemoryVerdicts()
    outcome = execute(config, verdicts)
    assert outcome.ok, outcome.verdict
    assert outcome.attrs["probe_cached"] is False and outcome.attrs["steps_run"] == 2
    assert non_ok_records(verdicts) == {}
