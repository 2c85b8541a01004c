"""Optuna's own sampler test kit (optuna.testing.pytest_samplers), instantiated for each sampler
hpo offers, two ways: plain, and exactly as a worker builds it (BindOnStart around AvoidKnownFailures
around the sampler; an in-process study uses the inner two). Not collected on its own (no test_ prefix):
tests/study/test_sampler_kit.py runs it and compares each wrapped case with its plain twin.
"""

from __future__ import annotations

import pytest
from optuna.testing.pytest_samplers import BasicSamplerTestCase, MultiObjectiveSamplerTestCase, RelativeSamplerTestCase

from hpo.config.schema import SamplerSpec
from hpo.runtime import BindOnStart
from hpo.study import SAMPLERS, AvoidKnownFailures

VARIANTS = {
    "plain": lambda base: base,
    "worker": lambda base: BindOnStart(AvoidKnownFailures(base, seed=0), on_start=lambda trial_id: None),
}


def _case(sampler: str, variant: str) -> type:
    def sampler_fixture(self):
        return lambda: VARIANTS[variant](SAMPLERS[sampler](SamplerSpec(name=sampler, seed=0)))

    bases = (BasicSamplerTestCase, RelativeSamplerTestCase, MultiObjectiveSamplerTestCase)
    return type(f"Test_{sampler}_{variant}", bases, {"sampler": pytest.fixture(sampler_fixture)})


for _sampler in SAMPLERS:
    for _variant in VARIANTS:
        globals()[f"Test_{_sampler}_{_variant}"] = _case(_sampler, _variant)
