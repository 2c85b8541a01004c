"""A precision this CPU only emulates is proven slow once per machine and kept with its ratio and
date; a study then rejects it for every model without a per-model proof, unless the stored ratio
is under EMULATED_SLOW_FROM. Which precisions are native differs by host (avx512_bf16, avx512_fp16,
AMX): the tests that need one kind fake the capability probe and hold on every host."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.verdicts import Kind
from hpo.verify.probing import run_probe
from hpo.verify.stored import MachineFacts, MemoryVerdicts
from hpo.verify.timing import _emulated as emulated
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")


def _emulated_here(monkeypatch, ratio: float | None) -> list[str]:
    """Fake: no precision is native on this CPU, and measuring gives `ratio` (None: the real
    measurement). Returns the precisions measured, in order."""
    measured: list[str] = []
    real = emulated.measure_emulation

    def measure(precision: str) -> dict:
        measured.append(precision)
        return real(precision) if ratio is None else {"ratio": ratio, "fp32_ms": 1.0, f"{precision}_ms": ratio}

    monkeypatch.setattr(emulated, "native", lambda precision: precision == "fp32")
    monkeypatch.setattr(emulated, "measure_emulation", measure)
    return measured


def test_an_emulated_precision_is_slow_for_every_model_from_one_stored_fact(monkeypatch, tmp_path):
    measured = _emulated_here(monkeypatch, 14.2)
    facts = MachineFacts(tmp_path)
    first = emulated.emulated_slow("bf16", CPU, facts)
    again = emulated.emulated_slow("bf16", CPU, MachineFacts(tmp_path))  # another study, same machine
    day = time.strftime("%Y-%m-%d", time.gmtime())
    assert str(first) == str(again) == f"slow: emulated on this CPU (bf16 matmul 14x fp32, machine fact of {day})"
    assert dict(first.implicates) == {"precision": "bf16"}  # no batch size, no other knob: every model
    assert measured == ["bf16"]  # measured once, read back after


def test_a_stored_ratio_under_the_threshold_leaves_it_to_the_per_model_proof(monkeypatch, tmp_path):
    _emulated_here(monkeypatch, emulated.EMULATED_SLOW_FROM - 0.5)
    assert emulated.emulated_slow("fp16", CPU, MachineFacts(tmp_path)) is None


def test_fresh_facts_measure_it_again(monkeypatch, tmp_path):
    """`hpo probe --fresh` reads no stored fact: the precision is proven again, and kept anew."""
    measured = _emulated_here(monkeypatch, 20.0)
    emulated.emulated_slow("fp16", CPU, MachineFacts(tmp_path))
    emulated.emulated_slow("fp16", CPU, MachineFacts(tmp_path, fresh=True))
    assert measured == ["fp16", "fp16"]


def test_a_native_precision_or_a_gpu_is_never_measured(monkeypatch, tmp_path):
    measured = _emulated_here(monkeypatch, 20.0)
    monkeypatch.setattr(emulated, "native", lambda precision: True)
    assert emulated.emulated_slow("bf16", CPU, MachineFacts(tmp_path)) is None
    assert emulated.emulated_slow("fp16", torch.device("cuda"), MachineFacts(tmp_path)) is None
    assert measured == []


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_measurement_runs_the_precisions_kernels_beside_fp32(precision):
    """On this host, whichever kind it is: both sides timed, and an emulated precision (by the
    capability probe) measured far slower than fp32, a native one not."""
    fact = emulated.measure_emulation(precision)
    assert fact["fp32_ms"] > 0 and fact[f"{precision}_ms"] > 0 and fact["rounds"] == emulated.ROUNDS
    if not emulated.native(precision):
        assert fact["ratio"] > emulated.EMULATED_SLOW_FROM, fact


def test_the_probe_rejects_an_emulated_precision_before_building_anything(monkeypatch, tmp_path):
    _emulated_here(monkeypatch, 14.0)
    monkeypatch.setattr("hpo.verify.probing._probe.AssembledModel", lambda *a, **k: pytest.fail("built a model"))
    config = dataclasses.replace(toy_config(Knobs(precision="bf16", attention="eager", optimizer="forloop")), skip_slow=True)
    workload = create_workload(config.workload, config.workload_options)
    result = run_probe(workload, config, CPU, MemoryVerdicts(), timed=False, machine=MachineFacts(tmp_path))
    assert result.verdict.kind is Kind.SLOW and result.blame == "machine fact", result.verdict
    assert result.verdict.detail.startswith("emulated on this CPU (bf16 matmul 14x fp32")


def test_a_study_that_judges_no_speed_probes_an_emulated_precision_as_usual(monkeypatch, tmp_path):
    measured = _emulated_here(monkeypatch, 14.0)
    config = toy_config(Knobs(precision="bf16", attention="eager", optimizer="forloop"))  # skip_slow off
    workload = create_workload(config.workload, config.workload_options)
    result = run_probe(workload, config, CPU, MemoryVerdicts(), timed=False, machine=MachineFacts(tmp_path))
    assert result.verdict.ok and result.loss_rel_err is not None and measured == []


@pytest.mark.parametrize("fresh", [False, True])
def test_hpo_probe_fresh_proves_an_emulated_precision_again(monkeypatch, tmp_path, fresh):
    """`hpo probe` reads the stored fact; `hpo probe --fresh` (its machine facts fresh) measures again."""
    from hpo.config.space import parse_space
    from hpo.strategy import sweep

    measured = _emulated_here(monkeypatch, 14.0)
    monkeypatch.setenv("HPO_MACHINE_FACTS", str(tmp_path / "elsewhere"))  # not the facts the sweep is handed
    emulated.emulated_slow("fp16", CPU, MachineFacts(tmp_path))  # an earlier study's fact
    space = parse_space(
        {
            "study": {"name": "fresh", "n_trials": 1},
            "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2},
            "params": {"lr": 1.0e-3, "batch_size": 8},
            "systems": {"precision": "fp16", "attention": "eager", "optimizer": "forloop"},
        },
        source="test",
    )
    (row,) = sweep(space, MemoryVerdicts(), machine=MachineFacts(tmp_path, fresh=fresh), memory=False)
    assert row.verdict.startswith("slow: emulated on this CPU (fp16 matmul 14x fp32"), row.verdict
    assert measured == (["fp16", "fp16"] if fresh else ["fp16"]), measured
