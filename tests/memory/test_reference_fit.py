"""Under a memory limit the probe times the fp32/eager reference at the trial's batch only when the
reference's own peak model predicts it fits there; that model is fitted as a trial's is, from one
sample up, each size predicted to fit first. Without a limit nothing is fitted.

Fault injection: every step's peak is stated (`FIXED` + a per-sample size by knobs: the reference
needs ten times the trial's per sample), the real step still runs, and every forward's knobs and
batch size are recorded, so the test sees whether any step ran at a batch whose stated peak is over
the limit."""

from __future__ import annotations

import pytest
import torch

from hpo.config.trial import Knobs, TrainingConfig, TrialConfig
from hpo.engine import AssembledModel
from hpo.hardware import GB
from hpo.records import RecordKey
from hpo.trial import execute
from hpo.verify.fault import REFERENCE_KNOBS
from hpo.verify.peaks import _peak_fit as peak_fit
from hpo.verify.stored import MemoryVerdicts, reference_key

FIXED = 10 * GB
PER_SAMPLE = {True: 1 * GB, False: GB // 10}  # keyed by "is the reference"
BATCH = 64
CPU = torch.device("cpu")


def _stated_peak(knobs: Knobs, batch: int) -> int:
    return FIXED + PER_SAMPLE[knobs == REFERENCE_KNOBS] * batch


@pytest.fixture
def steps(monkeypatch) -> list[tuple[Knobs, int]]:
    """Every forward's (knobs, batch size); the fit's steps measure their stated peaks."""
    seen: list[tuple[Knobs, int]] = []
    forward_backward, step_peak = AssembledModel.forward_backward, peak_fit._step_peak

    def recorded(self, batch):
        seen.append((self.knobs, self.workload.samples_in(batch)))
        return forward_backward(self, batch)

    def stated(model, workload, config, batch_size):
        step_peak(model, workload, config, batch_size)
        return _stated_peak(model.knobs, batch_size)

    monkeypatch.setattr(AssembledModel, "forward_backward", recorded)
    monkeypatch.setattr(peak_fit, "_step_peak", stated)
    return seen


def _config(limit_gb: float | None) -> TrialConfig:
    return TrialConfig(
        workload="toy_workloads:Toy",
        workload_options={"d_model": 16, "seq_len": 8, "n_blocks": 2},
        training=TrainingConfig(batch_size=BATCH, max_steps=2, eval_every=2),
        knobs=Knobs(attention="sdpa", optimizer="foreach"),
        skip_slow=False,
        memory_limit_gb=limit_gb,
    )


def test_a_reference_predicted_over_the_limit_is_never_stepped_at_the_trials_batch(steps):
    # The reference at 64: 10 GB + 64 GB, over 40 GB; the trial's knobs: 10 GB + 6.4 GB.
    store = MemoryVerdicts()
    outcome = execute(_config(limit_gb=40.0), store)
    assert outcome.verdict.ok, outcome.verdict
    assert [(k == REFERENCE_KNOBS, b) for k, b in steps if _stated_peak(k, b) > 40 * GB] == []
    assert outcome.attrs[RecordKey.SLOW_NOT_JUDGED] == (
        "the fp32/eager reference is predicted not to fit at batch 64 (predicted 74 GB > limit 40 GB, "
        "fits up to 30): nothing to judge this trial's speed against"
    )
    reference_batches = sorted({b for k, b in steps if k == REFERENCE_KNOBS})
    assert reference_batches == [1, 2, 4, 8, 16]  # its compared step at 4, its fit up to a quarter of 64 (8 and 16 again)
    assert store.get(reference_key(_config(40.0), CPU)) is None  # no step time made up


def test_a_reference_predicted_to_fit_is_timed_at_the_trials_batch(steps):
    store = MemoryVerdicts()
    outcome = execute(_config(limit_gb=100.0), store)
    assert outcome.verdict.ok, outcome.verdict
    # (2 training steps are too few for training's own slow check, which says so under the same key.)
    assert "reference" not in outcome.attrs.get(RecordKey.SLOW_NOT_JUDGED, "")
    assert (REFERENCE_KNOBS, BATCH) in steps
    assert store.get(reference_key(_config(100.0), CPU))["step_ms"] > 0


def test_without_a_limit_the_reference_is_timed_and_nothing_is_fitted(steps):
    store = MemoryVerdicts()
    outcome = execute(_config(limit_gb=None), store)
    assert outcome.verdict.ok, outcome.verdict
    assert sorted({b for k, b in steps if k == REFERENCE_KNOBS}) == [4, BATCH]  # compared, then timed
    assert [k for k in store.records if k.endswith(("-memory", "-peaks"))] == []
