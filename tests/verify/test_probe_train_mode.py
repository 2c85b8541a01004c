"""The probe verifies the step that training runs: its compared steps (reference and trial) run in
train mode, with every dropout probability 0 for them (`hpo.verify.probing._dropout_off`), so a module whose
backward needs train mode (cuDNN's RNN) works, and the comparison stays deterministic for every
built-in workload, each with its dropouts turned up."""

from __future__ import annotations

import pytest
import torch
from builtin_tiny import TINY_OPTIONS, builtin_config
from contracts.fakes.cudnn_rnn import CUDNN_RNN_EVAL_BACKWARD, CudnnLikeLSTM, patched_lstm

from hpo.config.trial import Knobs
from hpo.engine import AssembledModel
from hpo.verify.fault import REFERENCE_KNOBS
from hpo.verify.probing import loss_and_grads, run_probe
from hpo.verify.probing._dropout_off import _dropout_settings
from hpo.workloads.catalog import BUILTIN_WORKLOADS, create_workload

CPU = torch.device("cpu")
TRIAL_KNOBS = Knobs(precision="fp32", attention="sdpa", optimizer="foreach")


def test_every_builtin_workload_is_covered():
    assert set(TINY_OPTIONS) == set(BUILTIN_WORKLOADS)


def test_every_dropout_class_torch_exports_is_found_and_switched_off():
    """dropout_off names torch's dropout modules by their public classes: one torch adds is caught here."""
    classes = [getattr(torch.nn, name) for name in dir(torch.nn) if "Dropout" in name]
    modules = [cls(0.3) for cls in classes if isinstance(cls, type) and issubclass(cls, torch.nn.Module)]
    assert len(modules) >= 6
    found = _dropout_settings(torch.nn.Sequential(*modules))
    assert [(owner, name, value) for owner, name, value in found] == [(module, "p", 0.3) for module in modules]


def test_the_fake_lstm_refuses_what_cudnn_refuses():
    lstm = CudnnLikeLSTM(3, 4, batch_first=True)
    lstm.eval()
    out, _ = lstm(torch.randn(2, 5, 3))
    with pytest.raises(RuntimeError, match=CUDNN_RNN_EVAL_BACKWARD):
        out.sum().backward()
    lstm.train()
    out, _ = lstm(torch.randn(2, 5, 3))
    out.sum().backward()  # train mode: its backward runs
    assert lstm.weight_ih_l0.grad is not None


def _workload(name: str, folder, knobs: Knobs = TRIAL_KNOBS):
    config = builtin_config(name, folder, knobs)
    workload = create_workload(config.workload, config.workload_options)
    workload.bind_training(config.training.params())
    return workload, config


@pytest.mark.parametrize("name", sorted(TINY_OPTIONS))
def test_the_compared_step_runs_in_train_mode_and_draws_no_dropout(name, tmp_path):
    workload, config = _workload(name, tmp_path)
    assembled = AssembledModel(workload, REFERENCE_KNOBS, config.training, CPU)
    before = _dropout_settings(assembled.model)
    assert before and all(value > 0 for _, _, value in before), "the test needs a model with dropout on to mean anything"
    batch = assembled.move(next(workload.train_batches(4, config.seed)))
    modes = []
    for module in assembled.model.modules():  # a LightningModule's loss calls its submodules, not itself
        module.register_forward_hook(lambda module, args, out: modes.append(module.training))
    runs = []
    for seed in (1, 2):  # different random streams: dropout, if it drew, would differ
        torch.manual_seed(seed)
        assembled.model.zero_grad(set_to_none=True)
        runs.append(loss_and_grads(assembled, batch))
    assert modes and all(modes)  # every module ran in the mode training runs in
    (loss_1, grads_1), (loss_2, grads_2) = runs
    assert loss_1 == loss_2
    assert all(torch.equal(a, b) for a, b in zip(grads_1, grads_2, strict=True))
    # The probabilities are back for training: each one read now is the one read before the steps.
    assert [(owner, attr, getattr(owner, attr)) for owner, attr, _ in before] == before


@pytest.mark.parametrize("name", sorted(TINY_OPTIONS))
def test_every_builtin_workload_passes_the_probe_with_an_lstm_as_strict_as_cudnns(name, tmp_path, monkeypatch):
    patched_lstm(monkeypatch)
    workload, config = _workload(name, tmp_path)
    if name == "timeseries_classification":  # the CNN-LSTM: the fake is what it builds
        assert isinstance(workload.build_model("eager").lstm, CudnnLikeLSTM)
    result = run_probe(workload, config, CPU, keep_model=True, timed=False)
    assert str(result.verdict) == "ok", result
    assert result.loss_rel_err is not None and result.loss_rel_err < 1e-3
    # The handed-on model is in train mode with its dropout back, ready to train.
    model = result.model.model
    probabilities = [(name, value) for _, name, value in _dropout_settings(model)]
    assert model.training and probabilities == [(n, v) for _, n, v in _dropout_settings(workload.build_model("sdpa"))]
