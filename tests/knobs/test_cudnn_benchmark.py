"""systems.cudnn_benchmark: set per trial around its steps (not for the whole process), read inside
the step, compared with the request, and written by every exporter.

cuDNN runs only on CUDA: on this CPU the flag is set and restored all the same, and the knob reads
it as the step sees it only where cuDNN runs. The trial-level tests read it here as a CUDA step
would (`reads_like_cuda`), the same flag, so that the comparison with the request is exercised."""

from __future__ import annotations

import pytest
import torch
from conftest import toy_config

from hpo.app.export_as import hf_arguments, lightning_arguments, python_snippet
from hpo.app.export_as.winner import Winner
from hpo.config.schema import SystemsSpec
from hpo.config.trial import Knobs
from hpo.engine import AssembledModel
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import mismatches, observed_knobs
from hpo.knobs.systems import KNOBS
from hpo.trial import execute
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")
KNOB = KNOBS["cudnn_benchmark"]


@pytest.fixture
def reads_like_cuda(monkeypatch):
    """The knob reads the flag inside a CPU step as it does inside a CUDA one."""
    monkeypatch.setattr(type(KNOB), "read_in_step", lambda self, device_type: bool(torch.backends.cudnn.benchmark))


@pytest.fixture
def global_flag():
    """The process's own setting, put back after the test."""
    saved = torch.backends.cudnn.benchmark
    yield
    torch.backends.cudnn.benchmark = saved


def _step_flags(knobs: Knobs) -> tuple[list[bool], dict]:
    """The flag as the workload's loss saw it in one forward/backward, and the step's knobs_observed."""
    config = toy_config(knobs)
    workload = create_workload(config.workload, config.workload_options)
    seen: list[bool] = []
    loss = workload.training_loss
    workload.training_loss = lambda model, batch: (seen.append(torch.backends.cudnn.benchmark), loss(model, batch))[1]
    assembled = AssembledModel(workload, knobs, config.training, CPU)
    with capture_step(assembled) as evidence:
        assembled.forward_backward(next(workload.train_batches(8, 0)))
    return seen, observed_knobs(evidence)


@pytest.mark.parametrize("asked", [False, True])
def test_the_step_runs_under_the_trials_setting_and_the_process_keeps_its_own(asked, global_flag, reads_like_cuda):
    torch.backends.cudnn.benchmark = not asked
    seen, observed = _step_flags(Knobs(attention="eager", optimizer="forloop", cudnn_benchmark=asked))
    assert seen == [asked] and observed["cudnn_benchmark"] is asked
    assert torch.backends.cudnn.benchmark is (not asked)  # restored after the step


def test_on_a_cpu_nothing_is_observed_and_nothing_contradicts_the_request(global_flag):
    seen, observed = _step_flags(Knobs(attention="eager", optimizer="forloop", cudnn_benchmark=False))
    assert seen == [False] and observed["cudnn_benchmark"] is None
    assert mismatches(Knobs(attention="eager", optimizer="forloop", cudnn_benchmark=False), observed) == []


def test_a_setting_that_did_not_reach_the_step_is_refused_before_training(monkeypatch, global_flag, reads_like_cuda):
    # The fault: the knob is never applied, and the process's flag says the opposite of the request.
    import contextlib

    monkeypatch.setattr(type(KNOB), "applied", lambda self, value, device_type: contextlib.nullcontext())
    torch.backends.cudnn.benchmark = True
    config = toy_config(Knobs(attention="eager", optimizer="forloop", cudnn_benchmark=False), max_steps=3, eval_every=3)
    outcome = execute(config, MemoryVerdicts())
    # The probe's compared step shows it before any training step runs.
    assert str(outcome.verdict) == "incompatible: ran other than asked: cudnn_benchmark: asked False, ran True"
    assert "steps_run" not in outcome.attrs
    assert dict(outcome.verdict.implicates) == {"cudnn_benchmark": False}


def test_a_trial_records_the_setting_it_asked_and_the_one_it_ran(global_flag, reads_like_cuda):
    torch.backends.cudnn.benchmark = True
    config = toy_config(Knobs(attention="eager", optimizer="forloop", cudnn_benchmark=False), max_steps=3, eval_every=3)
    outcome = execute(config, MemoryVerdicts())
    assert outcome.ok, outcome.verdict
    assert outcome.attrs["knobs_requested"]["cudnn_benchmark"] is False
    assert outcome.attrs["knobs_observed"]["cudnn_benchmark"] is False


def test_the_schema_searches_it_and_refuses_a_non_bool():
    assert SystemsSpec(cudnn_benchmark=[False, True]).choices()["cudnn_benchmark"] == [False, True]
    with pytest.raises(ValueError, match="cudnn_benchmark"):
        SystemsSpec(cudnn_benchmark="sometimes")


def _winner(ran: bool | None) -> Winner:
    knobs = {name: knob.default for name, knob in KNOBS.items()} | {"attention": "sdpa", "cudnn_benchmark": ran}
    return Winner(
        number=1, knobs=knobs, compile_backend="inductor", lr=1e-3, batch_size=8, weight_decay=0.0, warmup_steps=0,
        grad_clip=1.0, max_steps=3, seed=0, device="cuda:0", workload={"name": "causal_lm"},
    )  # fmt: skip


def test_every_exporter_writes_the_setting_the_trial_ran():
    assert "    torch.backends.cudnn.benchmark = False" in python_snippet(_winner(False)).splitlines()
    assert lightning_arguments(_winner(True))[0]["benchmark"] is True
    assert any("torch.backends.cudnn.benchmark = False" in note for note in hf_arguments(_winner(False))[2])


def test_an_exporter_writes_nothing_for_a_trial_where_no_cudnn_ran():
    assert "cudnn" not in python_snippet(_winner(None))
    assert "benchmark" not in lightning_arguments(_winner(None))[0]
