"""A `slow` verdict needs the knobs slow against the reference in every round of the proof
(`hpo.verify.slow_proof.PROOF_ROUNDS`): a burst of load in one round, or a quiet round among slow ones,
proves nothing. Timings are injected (`time_model`, the proof's steady timing of a built model,
returns scripted step times), so each case is deterministic, whatever the machine's load. The round
counts are written out: a test that read them from PROOF_ROUNDS would pass whatever it became."""

from __future__ import annotations

import pytest
import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.verdicts import Kind
from hpo.verify import slow_proof as speed
from hpo.verify.reference_knobs import REFERENCE_KNOBS
from hpo.verify.slow import SlowLimit
from hpo.verify.steady import DEFAULT_POLICY, StepTimes
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")
REFERENCE_MS, QUIET_MS, BURST_MS = 10.0, 12.0, 100.0  # a burst is 10x the reference, over the 5x limit
KNOBS = Knobs(precision="fp32", attention="eager", optimizer="foreach")  # one value differs: one subset


def _prove(monkeypatch, slow_rounds: set[int]) -> tuple[object, list[float]]:
    """prove_slow with the reference at REFERENCE_MS, and the knobs at BURST_MS in the rounds
    given (0-based, counted by the knobs' timings) and QUIET_MS in the others."""
    config = toy_config(KNOBS)
    workload = create_workload(config.workload, config.workload_options)
    knob_times: list[float] = []

    def scripted(assembled, batch, policy=DEFAULT_POLICY) -> StepTimes:
        if assembled.knobs == REFERENCE_KNOBS:
            ms = REFERENCE_MS
        else:
            knob_times.append(BURST_MS if len(knob_times) in slow_rounds else QUIET_MS)
            ms = knob_times[-1]
        return StepTimes((ms,) * policy.window, policy.warmup_steps, policy.window)

    monkeypatch.setattr(speed, "time_model", scripted)
    limit = SlowLimit(reference_ms=REFERENCE_MS, ratio=5.0, batch_size=config.training.batch_size)
    proof = speed.prove_slow(workload, config, CPU, limit)
    assert proof.not_judged is None  # the scripted reference holds still: every case is judged
    return proof.verdict, knob_times


def test_slow_in_every_round_is_a_verdict_on_the_value_alone(monkeypatch):
    verdict, knob_times = _prove(monkeypatch, {0, 1, 2})
    assert verdict is not None and verdict.kind is Kind.SLOW
    assert dict(verdict.implicates) == {"optimizer": "foreach", "batch_size": 16}
    assert knob_times == [BURST_MS, BURST_MS, BURST_MS]  # timed in all 3 rounds before the verdict


def test_a_burst_in_one_round_is_no_verdict(monkeypatch):
    """The first round is always timed: a burst there alone is seen, then not repeated."""
    verdict, knob_times = _prove(monkeypatch, {0})
    assert verdict is None
    assert knob_times[:2] == [BURST_MS, QUIET_MS]


@pytest.mark.parametrize("quiet_round", [0, 1, 2])
def test_one_quiet_round_among_slow_ones_is_no_verdict(monkeypatch, quiet_round):
    """Slow in every round but one, the last included: the verdict needs all 3."""
    verdict, knob_times = _prove(monkeypatch, {0, 1, 2} - {quiet_round})
    assert verdict is None
    assert knob_times[quiet_round] == QUIET_MS  # the proof reached the quiet round


def test_only_the_first_round_runs_untimed_steps(monkeypatch):
    """Both models are built once and warm after the first round: later rounds only time. With
    the untimed step in every round a bf16 proof on an AVX2 CPU cost 3 more emulated steps."""
    policies: list[tuple[bool, int]] = []
    config = toy_config(KNOBS)
    workload = create_workload(config.workload, config.workload_options)

    def scripted(assembled, batch, policy=DEFAULT_POLICY) -> StepTimes:
        policies.append((assembled.knobs == REFERENCE_KNOBS, policy.warmup_steps))
        ms = REFERENCE_MS if assembled.knobs == REFERENCE_KNOBS else BURST_MS
        return StepTimes((ms,) * policy.window, policy.warmup_steps, policy.window)

    monkeypatch.setattr(speed, "time_model", scripted)
    limit = SlowLimit(reference_ms=REFERENCE_MS, ratio=5.0, batch_size=config.training.batch_size)
    assert speed.prove_slow(workload, config, CPU, limit).verdict is not None
    warmups = [warmup for _, warmup in policies]
    assert warmups == [1, 1, 0, 0, 0, 0], policies  # reference and knobs in each of 3 rounds


def test_a_warm_model_of_the_whole_combination_is_timed_without_a_build_or_an_untimed_step(monkeypatch):
    """`hpo probe` hands the proof the trial's model it has just timed: the subset that is the whole
    combination is timed on it, never rebuilt and never warmed up again (an emulated bf16 step took
    17 s on one AVX2 core)."""
    from hpo.engine.assembly import AssembledModel

    config = toy_config(KNOBS)
    workload = create_workload(config.workload, config.workload_options)
    warm = AssembledModel(workload, KNOBS, config.training, CPU)
    built, warmups = [], []
    build = speed._built

    def recording_build(workload, config, knobs, device):
        built.append(knobs)
        return build(workload, config, knobs, device)

    def scripted(assembled, batch, policy=DEFAULT_POLICY) -> StepTimes:
        if assembled is warm:
            warmups.append(policy.warmup_steps)
        ms = REFERENCE_MS if assembled.knobs == REFERENCE_KNOBS else BURST_MS
        return StepTimes((ms,) * policy.window, policy.warmup_steps, policy.window)

    monkeypatch.setattr(speed, "_built", recording_build)
    monkeypatch.setattr(speed, "time_model", scripted)
    limit = SlowLimit(reference_ms=REFERENCE_MS, ratio=5.0, batch_size=config.training.batch_size)
    assert speed.prove_slow(workload, config, CPU, limit, warm=warm).verdict is not None
    assert built == [REFERENCE_KNOBS] and warmups == [0, 0, 0], (built, warmups)
