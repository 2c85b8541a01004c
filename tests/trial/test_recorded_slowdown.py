"""A trial's recorded `slowdown` divides its steps by the reference's stored step time. Where that
time was taken on a busier moment, every slowdown reads too low: an EfficientNet study stored a
reference step of 5336 ms where its own knobs trained at 807 ms, and every later trial read 0.02-0.06.
An implausibly low slowdown is timed again side by side, and a faster reference replaces the stored."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.trial import execute
from hpo.trial._slowdown import RETIME_BELOW
from hpo.verify.fault import REFERENCE_KNOBS
from hpo.verify.stored import MemoryVerdicts, reference_key

CPU = torch.device("cpu")
INFLATED_MS = 60_000.0  # the toy's reference step takes milliseconds


def _trained(knobs: Knobs) -> tuple[dict, MemoryVerdicts]:
    config = dataclasses.replace(toy_config(knobs, max_steps=4, eval_every=4), skip_slow=True)
    verdicts = MemoryVerdicts()
    verdicts.put(reference_key(config, CPU), {"step_ms": INFLATED_MS, "timed_at": 0.0})
    outcome = execute(config, verdicts)
    assert str(outcome.verdict) == "ok", outcome.verdict
    return outcome.attrs, verdicts.get(reference_key(config, CPU))


def _steady_side_by_side(monkeypatch, reference_ms: float, knobs_ms: float) -> None:
    """The re-timing's steps, scripted: every reference step `reference_ms`, every knobs step
    `knobs_ms`. Timed for real, on a 2-core host at a load of 12 five re-timings in a row were too
    uneven to compare (the designed `None`, proven by a fault below); what is proven here is what
    hpo does with a re-timing, so its times are given, not measured."""
    from hpo.verify.timing import StepTimes
    from hpo.verify.timing import _side_by_side as side_by_side

    def scripted(assembled, batch, policy, stop_past_ms=None) -> StepTimes:
        ms = reference_ms if assembled.knobs == REFERENCE_KNOBS else knobs_ms
        return StepTimes((ms,), policy.warmup_steps, 1)

    monkeypatch.setattr(side_by_side, "time_model", scripted)


def test_a_slowdown_far_under_one_is_timed_again_beside_the_reference(monkeypatch):
    """foreach AdamW on the toy runs at about the reference's speed: against a stored reference of a
    minute it would read 0.0001. Timed again side by side (here 12 ms against 10 ms) it reads 1.2,
    and the faster reference step is kept for later trials."""
    _steady_side_by_side(monkeypatch, reference_ms=10.0, knobs_ms=12.0)
    attrs, reference = _trained(Knobs(precision="fp32", attention="eager", optimizer="foreach"))
    again = attrs["slowdown_timed_again"]
    assert again["stored_reference_ms"] == INFLATED_MS and again["slowdown_against_stored"] < RETIME_BELOW, again
    assert (again["step_ms"], again["reference_ms"]) == (12.0, 10.0), again
    assert attrs["slowdown"] == pytest.approx(1.2), again  # the side-by-side ratio, not against a minute
    assert reference["step_ms"] == 10.0, reference


@pytest.mark.usefixtures("one_torch_thread")
def test_the_reference_knobs_own_training_steps_replace_a_slower_stored_reference():
    """Trial 6 of an EfficientNet study ran the reference's own knobs at 40.3 ms a step against a stored
    109 ms: its steps are the reference's speed, and later trials are judged against them."""
    attrs, reference = _trained(REFERENCE_KNOBS)
    assert attrs["slowdown"] == 1.0 and "slowdown_timed_again" not in attrs
    assert reference["step_ms"] < INFLATED_MS / 10 and reference["replaced_by"].startswith("the reference knobs"), reference


def test_a_side_by_side_timing_too_uneven_to_compare_records_no_slowdown_and_why(monkeypatch):
    """Fault: every reference step of the re-timing takes twice the one before, so its fastest never
    agree (at a load of 40 a knobs step read 42 ms beside reference steps of 458 ms and more, and
    0.09 was recorded for a knob a plain loop measures at 1.4x). No slowdown is recorded, the
    stored reference is kept, and the record says why."""
    from hpo.verify.timing import StepTimes
    from hpo.verify.timing import _side_by_side as side_by_side

    doubling = iter(10.0 * 2**i for i in range(100))

    def scripted(assembled, batch, policy, stop_past_ms=None) -> StepTimes:
        ms = next(doubling) if assembled.knobs == REFERENCE_KNOBS else 10.0
        return StepTimes((ms,), policy.warmup_steps, 1)

    monkeypatch.setattr(side_by_side, "time_model", scripted)
    attrs, reference = _trained(Knobs(precision="fp32", attention="eager", optimizer="foreach"))
    assert attrs["slowdown"] is None, attrs["slowdown_timed_again"]
    assert attrs["slow_not_judged"].startswith("timed again side by side, too noisy to judge: reference spread "), attrs
    assert reference["step_ms"] == INFLATED_MS  # nothing replaced on steps that uneven
