"""The reference a probe compares a trial with is proven to be the fp32/eager reference: its own
compared step is observed, as a trial's is. A Whisper wrapper that ignored the attention knob made
the "eager" reference run `sdpa_flash`; sdpa trials then passed "against eager" with an error of
exactly 0, while the same study refused eager for running sdpa."""

from __future__ import annotations

import dataclasses

import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.verdicts import Kind
from hpo.verify.probing import run_probe
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")
SDPA = Knobs(precision="fp32", attention="sdpa", optimizer="forloop")


def _probe(workload_name: str, knobs: Knobs):
    config = dataclasses.replace(toy_config(knobs), workload=workload_name)
    return run_probe(create_workload(config.workload, config.workload_options), config, CPU, MemoryVerdicts(), timed=False)


def test_comparisons_against_a_reference_that_ran_another_kernel_are_unjudged_with_the_cause():
    result = _probe("toy_workloads:AttentionIgnoringToy", SDPA)
    assert result.verdict.ok, result.verdict
    assert result.numerics_not_judged is not None
    assert result.numerics_not_judged.startswith("the reference ran sdpa"), result.numerics_not_judged
    assert result.numerics_not_judged.endswith(", not eager: this workload ignores `attention`")
    assert result.loss_rel_err is None and result.grad_rel_err is None  # never recorded as error 0


def test_the_eager_knobs_on_that_workload_are_still_refused_for_running_sdpa():
    result = _probe("toy_workloads:AttentionIgnoringToy", Knobs(precision="fp32", attention="eager", optimizer="foreach"))
    assert result.verdict.kind is Kind.INCOMPATIBLE and "attention: asked eager, ran sdpa" in result.verdict.detail


def test_a_reference_that_ran_its_own_knobs_judges_the_comparison():
    result = _probe("toy_workloads:Toy", SDPA)
    assert result.verdict.ok and result.numerics_not_judged is None
    assert result.loss_rel_err is not None and result.grad_rel_err is not None
