"""Probe one knob combination for a sweep: read its verdict from the study's store or this
machine's facts, or judge it by the probe; then its speed, and, under a memory limit, what fits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from hpo.config.trial import TrialConfig
from hpo.errors import error_verdict, short_traceback
from hpo.logging import get_logger
from hpo.strategy._memory_fit import memory_fit
from hpo.strategy._rows import SweepRow
from hpo.strategy._warm_models import WarmModels
from hpo.trial import cached_verdict
from hpo.verify.fault import REFERENCE_KNOBS, is_sticky_device_error
from hpo.verify.probing import ReferenceMemory, keep_probe, run_probe
from hpo.verify.stored import (
    MachineFacts,
    VerdictStore,
    batch_signature,
    implied_failure,
    model_signature,
    speed_key,
    verdict_key,
)
from hpo.verify.timing import DEFAULT_POLICY, StepTimes, TimingPolicy, time_knobs

__all__ = ["SignedMachine", "error_row", "knobs_text", "probe_combination"]

_log = get_logger(__name__)


@dataclass
class _Found:
    """What the study's store, or else this machine's facts, hold for one combination."""

    key: str
    facts: dict
    machine_key: str | None
    known: dict | None  # the machine fact read in, when the study's store had no answer
    record: dict | None
    speed: dict | None
    cached: bool


def probe_combination(
    workload,
    config: TrialConfig,
    device: torch.device,
    store: VerdictStore,
    references: ReferenceMemory,
    ceiling: int | None,
    signed=None,
    policy: TimingPolicy = DEFAULT_POLICY,
    warm: WarmModels | None = None,
) -> SweepRow:
    found = _look_up(config, device, store, signed)
    implied = None if found.cached else implied_failure(store, _values(config), found.facts["device"])
    if implied is not None:
        return SweepRow(config.knobs.as_dict(), str(implied), None, None, None, None, None, cached=True)
    if not found.cached:
        try:
            probe = _probe(workload, config, device, store, references, policy, warm, signed)
        except Exception as exc:
            if is_sticky_device_error(exc):
                raise
            return _logged_error_row(config, exc)
        _keep(found, probe, store, config.training.batch_size, warm, signed)
    return _row(workload, config, device, store, ceiling, signed, policy, found)


def _probe(workload, config: TrialConfig, device, store, references, policy, warm, signed):
    # `hpo probe --fresh` proves an emulated precision again too (`hpo.verify.timing._emulated`).
    machine = signed.machine if signed is not None else None
    keep_timed = warm is not None
    return run_probe(
        workload, config, device, store, references=references, policy=policy, keep_timed=keep_timed, machine=machine
    )


def _logged_error_row(config: TrialConfig, exc: Exception) -> SweepRow:
    """An error is no verdict: logged with its traceback, the row says so."""
    _log.warning(f"hpo probe: {knobs_text(config)} failed with an error (not a verdict):\n{short_traceback(exc)}")
    return error_row(config, exc)


def _look_up(config: TrialConfig, device: torch.device, store: VerdictStore, signed) -> _Found:
    """The study's stored verdict and speed; without both (a failed verdict needs no speed), this
    machine's fact proved by an earlier study, copied into this study's store."""
    key, facts = verdict_key(config, device)
    batch_size = config.training.batch_size
    record, speed = store.get(key), store.get(speed_key(key, batch_size))
    cached = record is not None and (speed is not None or not cached_verdict(record).ok)
    machine_key = signed.key(facts) if signed is not None else None
    known = signed.machine.get(machine_key) if signed is not None and not cached else None
    if known is None:
        return _Found(key, facts, machine_key, None, record, speed, cached)
    store.add(key, known["verdict"])
    if known.get("speed") is not None:
        store.add(speed_key(key, batch_size), known["speed"])
    return _Found(key, facts, machine_key, known, known["verdict"], known.get("speed"), True)


def _keep(found: _Found, probe, store: VerdictStore, batch_size: int, warm: WarmModels | None, signed) -> None:
    """The probe's verdict and speed into the study's store and this machine's facts; its timed
    model to the warm models a sweep hands on."""
    found.record, found.speed = keep_probe(store, found.key, found.facts, probe, batch_size)
    if probe.timed_model is not None:
        warm.offer(probe.timed_model, probe.peak_mem_mb)
    if signed is not None:
        signed.machine.put(found.machine_key, {"facts": found.facts, "verdict": found.record, "speed": found.speed})


def _row(workload, config: TrialConfig, device, store, ceiling, signed, policy, found: _Found) -> SweepRow:
    """The sweep's row of a combination whose verdict and speed are found: a speed read from this
    machine's facts timed again when the sweep confirms them, and what fits under a memory limit."""
    verdict = _verdict(found)
    ok = verdict.ok
    confirm = found.known is not None and ok and (found.speed or {}).get("trial_step_ms") and signed.confirm
    timed_now = _timed_now(workload, config, device, policy) if confirm else None
    fit = memory_fit(workload, config, device, store, found.key, ceiling) if ok and ceiling is not None else None
    speed = _speed_figures(found.speed or {}, ok, timed_now)
    return SweepRow(
        knobs=config.knobs.as_dict(),
        verdict=str(verdict),
        samples_per_s=1000 * config.training.batch_size / speed.step_ms if ok and speed.step_ms else None,
        slowdown=speed.slowdown,
        slowdown_at_least=bool((found.speed or {}).get("trial_step_stopped")),
        **{name: found.record.get(name) for name in _RECORD_FIGURES},
        cached=found.cached,
        **_machine_fields(found),
        timed_now=timed_now is not None,
        steps_ms=speed.steps_ms,
        predicted_peak_mb=fit.predicted_peak_mb if fit else None,
        largest_batch=fit.largest_batch if fit else None,
    )


def _verdict(found: _Found):
    """The stored verdict; a passed one gives way to its speed fact's verdict, at this batch size."""
    verdict = cached_verdict(found.record)
    return cached_verdict(found.speed) if verdict.ok and found.speed is not None else verdict


def _machine_fields(found: _Found) -> dict:
    """The row's account of this machine's facts: its key there, and the fact it was read from."""
    known = found.known or {}
    return {
        "machine_key": found.machine_key,
        "from_machine": found.known is not None,
        "known_ms": known.get("raced_ms"),
        "fact_at": known.get("at"),
    }


# What a row shows of the verdict's record as stored.
_RECORD_FIGURES = ("peak_mem_mb", "loss_rel_err", "grad_rel_err", "loss_bound", "grad_bound")


class _SpeedFigures(NamedTuple):
    step_ms: float | None
    steps_ms: list[float] | None
    slowdown: float | None


def _speed_figures(speed: dict, ok: bool, timed_now: StepTimes | None) -> _SpeedFigures:
    """The row's step time, timed steps and slowdown: as stored, or from the step timed now, the
    stored slowdown (the fact's ratio to the reference) carried over to it."""
    step_ms, slowdown = speed.get("trial_step_ms"), speed.get("slowdown")
    if timed_now is None:
        return _SpeedFigures(step_ms, speed.get("trial_steps_ms") if ok else None, slowdown)
    slowdown = None if slowdown is None else slowdown * timed_now.best_ms / step_ms
    return _SpeedFigures(timed_now.best_ms, list(timed_now.times_ms), slowdown)


class SignedMachine:
    """This machine's facts, with the signature of the model and batch a sweep probes (one model
    built to read it: its shapes, not its weights, are what the key needs)."""

    def __init__(self, machine: MachineFacts, workload, config: TrialConfig, confirm: bool = False) -> None:
        self.machine = machine
        self.confirm = confirm  # a speed read from the facts is timed again before it ranks (`hpo probe`)
        self.signature = model_signature(workload.build_model(REFERENCE_KNOBS.attention))
        self.batch = batch_signature(next(workload.train_batches(config.training.batch_size, config.seed)))

    def key(self, facts: dict) -> str:
        return self.machine.key(self.signature, self.batch, facts)[0]


def _timed_now(workload, config: TrialConfig, device: torch.device, policy: TimingPolicy) -> StepTimes:
    """A combination whose verdict and speed were read from this machine's facts, timed again now:
    the fact was timed on another day, under another load. A second `hpo probe` on a fresh study
    printed a one-step figure from the facts to the decimal, ranked at 0.67 of the top where its
    trials trained faster than the top row's own figure."""
    batch = next(workload.train_batches(config.training.batch_size, config.seed))
    return time_knobs(workload, config, config.knobs, device, batch, policy)


def error_row(config: TrialConfig, exc: BaseException) -> SweepRow:
    return SweepRow(config.knobs.as_dict(), str(error_verdict(exc)), None, None, None, None, None, cached=False)


def _values(config: TrialConfig) -> dict:
    """What a verdict's implicated part can name: the knobs, and the batch size a `slow` was timed at."""
    return {**config.knobs.as_dict(), "batch_size": config.training.batch_size}


def knobs_text(config: TrialConfig) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.knobs.as_dict().items())
