"""A worker's later probes of one model read the reference's compared step from files instead of
building and running the reference again, and reach the same verdicts and errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import toy_config

import hpo.verify.probing._compared_step as compared_step_module
import hpo.verify.probing._probe as probe_module
from hpo.config.trial import Knobs
from hpo.verify.fault import REFERENCE_KNOBS
from hpo.verify.probing import run_probe
from hpo.verify.probing._bounds import Errors
from hpo.verify.probing._kept_reference import ComparedReference, ReferenceFiles, ReferenceMemory, compared_key
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")
SDPA_FUSED = Knobs(precision="fp32", attention="sdpa", optimizer="fused")
BF16_FOREACH = Knobs(precision="bf16", attention="eager", optimizer="foreach")


def config_for(knobs: Knobs, workload: str = "toy_workloads:HparamFreeToy", lr: float = 3e-3, **options):
    config = dataclasses.replace(toy_config(knobs, **options), workload=workload)
    return dataclasses.replace(config, training=dataclasses.replace(config.training, lr=lr))


@pytest.fixture
def reference_builds(monkeypatch) -> list[Knobs]:
    """The knobs of every model the probe builds."""
    built: list[Knobs] = []
    original = probe_module.AssembledModel

    def counting(workload, knobs, training, device):
        built.append(knobs)
        return original(workload, knobs, training, device)

    for module in (probe_module, compared_step_module):  # the reference, and the models under knobs
        monkeypatch.setattr(module, "AssembledModel", counting)
    return built


def probe(config, verdicts, references=None):
    return run_probe(create_workload(config.workload, config.workload_options), config, CPU, verdicts, references=references)


def test_a_later_probe_reads_the_reference_and_builds_only_the_trial(tmp_path, reference_builds):
    verdicts, files = MemoryVerdicts(), ReferenceFiles(tmp_path)
    first = probe(config_for(SDPA_FUSED), verdicts, files)
    assert first.ok and not first.reference_reused
    assert reference_builds == [REFERENCE_KNOBS, SDPA_FUSED]
    assert len(list(tmp_path.glob("compared-*.pt"))) == 1
    reference_builds.clear()
    later = probe(config_for(BF16_FOREACH, lr=1e-4), verdicts, files)  # another lr: the same reference
    assert later.reference_reused
    # The reference's model once more, from the kept weights, for bf16's rounding floor on this model.
    assert reference_builds == [BF16_FOREACH, REFERENCE_KNOBS]
    # The same comparison as a probe that runs its own reference.
    alone = probe(config_for(BF16_FOREACH), MemoryVerdicts())
    assert numerics(later) == numerics(alone)
    assert later.loss_rel_err > 0 and later.grad_floor > 0  # bf16 really differs from the fp32 reference
    # The floor was kept with the reference: a third probe builds only its trial.
    reference_builds.clear()
    third = probe(config_for(BF16_FOREACH, lr=3e-4), verdicts, files)
    assert reference_builds == [BF16_FOREACH] and numerics(third) == numerics(alone)


def numerics(result):
    fields = ("verdict", "loss_rel_err", "grad_rel_err", "loss_floor", "grad_floor", "loss_bound", "grad_bound")
    return {name: getattr(result, name) for name in fields}


def test_in_memory_the_reference_is_kept_as_it_was_before_its_timing(reference_builds):
    """Trials that share a process keep the reference in memory: the same comparison as a probe
    that runs its own reference, though the first probe's timing updated the reference's own
    parameters (its initial weights) after it was kept."""
    verdicts, memory = MemoryVerdicts(), ReferenceMemory()
    first = probe(config_for(SDPA_FUSED), verdicts, memory)
    assert first.ok and not first.reference_reused and first.reference_step_ms is not None  # it was timed
    reference_builds.clear()
    later = probe(config_for(BF16_FOREACH, lr=1e-4), verdicts, memory)
    assert later.reference_reused
    assert reference_builds == [BF16_FOREACH, REFERENCE_KNOBS]  # the second: bf16's rounding floor
    alone = probe(config_for(BF16_FOREACH), MemoryVerdicts())
    assert numerics(later) == numerics(alone)


def test_a_reference_still_to_be_timed_runs_its_own_step(tmp_path, reference_builds):
    files = ReferenceFiles(tmp_path)
    probe(config_for(SDPA_FUSED), MemoryVerdicts(), files)
    reference_builds.clear()
    fresh = probe(config_for(BF16_FOREACH), MemoryVerdicts(), files)  # no reference step time in this store
    assert not fresh.reference_reused
    assert reference_builds == [REFERENCE_KNOBS, BF16_FOREACH]


def test_the_trial_is_compared_with_what_the_files_hold(tmp_path):
    """A wrong file gives a wrong verdict: the probe really compares with the stored reference."""
    verdicts, files = MemoryVerdicts(), ReferenceFiles(tmp_path)
    config = config_for(SDPA_FUSED)
    assert probe(config, verdicts, files).ok
    workload = create_workload(config.workload, config.workload_options)
    key = compared_key(workload, config, CPU)
    stored = files.get(key, CPU)
    files.put(key, ComparedReference(stored.loss, [2 * g for g in stored.grads], stored.initial, stored.samples))
    result = probe(config_for(BF16_FOREACH), verdicts, files)
    assert result.reference_reused
    assert str(result.verdict).startswith("incompatible: gradients differ from fp32/eager by"), str(result.verdict)


def test_the_key_follows_the_model_and_compared_batch_not_the_knobs():
    workload = create_workload("toy_workloads:HparamFreeToy", {})
    base = config_for(SDPA_FUSED)
    key = compared_key(workload, base, CPU)
    assert compared_key(workload, config_for(BF16_FOREACH, lr=1.0), CPU) == key
    assert compared_key(workload, config_for(SDPA_FUSED, d_model=64), CPU) != key
    assert compared_key(workload, dataclasses.replace(base, seed=1), CPU) != key
    # A compiled trial is compared on its training batch, so on other samples.
    assert compared_key(workload, config_for(dataclasses.replace(SDPA_FUSED, compile=True)), CPU) != key


def test_a_workload_whose_model_may_read_the_hyperparameters_keys_them_too():
    workload = create_workload("toy_workloads:Toy", {})
    assert workload.model_reads_hparams  # the default for any workload that does not say otherwise
    key = compared_key(workload, config_for(SDPA_FUSED, workload="toy_workloads:Toy"), CPU)
    assert compared_key(workload, config_for(SDPA_FUSED, workload="toy_workloads:Toy", lr=1.0), CPU) != key


def test_files_are_whole_or_absent(tmp_path):
    files = ReferenceFiles(tmp_path)
    assert files.get("compared-missing", CPU) is None
    reference = ComparedReference(1.5, [torch.ones(3), torch.zeros(2)], {"w": torch.arange(4.0)}, 16, {"bf16": Errors(0.1, 0.2)})
    files.put("compared-x", reference)
    assert [p.name for p in tmp_path.iterdir()] == ["compared-x.pt"]  # no temporary file left
    back = files.get("compared-x", CPU)
    assert back.loss == 1.5 and torch.equal(back.grads[0], torch.ones(3)) and torch.equal(back.initial["w"], torch.arange(4.0))
    assert back.samples == 16 and back.floors == {"bf16": Errors(0.1, 0.2)}


def test_a_folder_that_cannot_take_the_file_changes_only_the_cost(tmp_path, monkeypatch, capsys):
    import errno

    def full_disk(obj, f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    verdicts, files = MemoryVerdicts(), ReferenceFiles(tmp_path)
    assert probe(config_for(SDPA_FUSED), verdicts, files).ok
    assert list(tmp_path.iterdir()) == []  # no partial file left behind
    assert "not kept" in capsys.readouterr().err
    later = probe(config_for(BF16_FOREACH), verdicts, files)
    assert later.ok and not later.reference_reused
