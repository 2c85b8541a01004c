"""A knob that no evidence observed is recorded as null, never as a value."""

from __future__ import annotations

from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.evidence.observe import StepEvidence, mismatches, observed_knobs
from hpo.trial import execute
from hpo.verify.stored import MemoryVerdicts


def test_a_step_that_showed_nothing_observes_nothing():
    observed = observed_knobs(StepEvidence())
    assert observed["precision"] is None and observed["attention"] is None and observed["optimizer"] is None
    assert observed["attention_dtype"] is None
    # Nothing observed contradicts nothing: no mismatch is invented either.
    assert not [m for m in mismatches(Knobs(precision="bf16", optimizer="fused"), observed) if m.knob != "grad_scaler"]


def test_a_rejected_trial_records_only_what_its_probe_saw():
    outcome = execute(toy_config(Knobs(precision="fp16", attention="eager", optimizer="fused"), overflow=1.0e5), MemoryVerdicts())
    assert str(outcome.verdict).startswith("incompatible: non-finite")
    observed = outcome.attrs.get("knobs_observed") or {}
    assert observed.get("optimizer") is None  # the step overflowed before any optimizer step: not "forloop"
