"""The probe leaves nothing behind: when training starts, the reference's model, its optimizer (and
so its state) and the kept copies of its step are dead, with the garbage collector off. Only
reference counting frees them, as it frees a model on a GPU the moment its last name goes: a cycle
(a scheduler holding a bound method of the model's owner) would keep 1.75 GB of a 152.7M model's
fp32 weights and AdamW state alive through a whole trial until some later gc.collect."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.engine import AssembledModel
from hpo.trial import _executor as executor
from hpo.verify.probing import _probe as probe_module
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import create_workload

TRIAL_KNOBS = Knobs(precision="fp32", attention="sdpa", optimizer="foreach")


@pytest.fixture
def no_gc():
    # Imports first: torch imports Dynamo lazily, on a model's first optimizer, and torch.fx's
    # `wrap` keeps the frame that imported it (torch/fx/_symbolic_trace.py), with every caller's
    # frame behind it: once per process, in the forkserver's warm-up for a real trial.
    config = toy_config(TRIAL_KNOBS, max_steps=1, eval_every=1)
    executor.execute(config, MemoryVerdicts())
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def built(monkeypatch) -> list:
    """Weak references to every AssembledModel built, its parameters and its optimizer, and to
    every compared reference kept by the probe (its gradients and initial weights)."""
    refs: list[tuple[str, weakref.ref]] = []
    init = AssembledModel.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        refs.append((f"model {self.knobs}", weakref.ref(self)))
        refs.append((f"optimizer {self.knobs}", weakref.ref(self.optimizer)))
        refs.extend((f"parameter {self.knobs}", weakref.ref(p)) for p in self.model.parameters())

    kept = probe_module.ComparedReference

    def recording_reference(loss, grads, initial, samples, **kwargs):
        reference = kept(loss, grads, initial, samples, **kwargs)
        refs.append(("compared reference", weakref.ref(reference)))
        refs.extend(("compared gradient", weakref.ref(g)) for g in grads)
        return reference

    monkeypatch.setattr(AssembledModel, "__init__", recording_init)
    monkeypatch.setattr(probe_module, "ComparedReference", recording_reference)
    return refs


def _alive(refs: list, *keep) -> list[str]:
    kept_ids = {id(k) for k in keep}
    return [name for name, ref in refs if ref() is not None and id(ref()) not in kept_ids]


def test_when_training_starts_only_the_trials_model_is_alive(no_gc, built, monkeypatch):
    seen = {}
    train = executor.train

    def checking_train(assembled, *args, **kwargs):
        keep = [assembled, assembled.optimizer, *assembled.model.parameters()]
        seen["alive"] = _alive(built, *keep)
        return train(assembled, *args, **kwargs)

    monkeypatch.setattr(executor, "train", checking_train)
    assert executor.execute(toy_config(TRIAL_KNOBS, max_steps=2, eval_every=2), MemoryVerdicts()).ok
    assert sum(name.startswith("model") for name, _ in built) == 2  # the reference and the trial's, each built once
    assert seen["alive"] == []


def test_a_probe_that_trains_nothing_leaves_nothing_alive(no_gc, built):
    """`hpo probe`'s probe (timed, nothing handed on): everything it built is dead when it returns."""
    config = toy_config(TRIAL_KNOBS)
    workload = create_workload(config.workload, config.workload_options)
    result = probe_module.run_probe(workload, config, torch.device("cpu"))
    assert result.ok and result.model is None
    assert _alive(built) == []


def test_what_the_probe_freed_is_handed_back_before_training(no_gc, built, monkeypatch):
    """Freed is not enough where the allocator keeps freed memory (glibc here, CUDA's caching
    allocator there): the probe hands it back once the reference is dead, so a trial holds no more
    than the model trained alone would. Each hand-back sees which models are still alive."""
    from hpo.hardware import _memory as memory

    handed_back = []
    monkeypatch.setattr(memory, "release_freed_memory", lambda: handed_back.append(_alive(built)))
    config = toy_config(TRIAL_KNOBS, max_steps=2, eval_every=2)
    assert executor.execute(config, MemoryVerdicts()).ok
    models = [name for name, _ in built if name.startswith("model")]
    assert handed_back and handed_back[0] and all(name.startswith(("model", "optimizer", "parameter")) for name in handed_back[0])
    # At the probe's hand-back only the trial's model is alive: the reference's is gone.
    first = handed_back[0]
    assert {name for name in first if name.startswith("model")} == {models[1]}, (models, first)
