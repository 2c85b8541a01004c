"""Probe one knob combination for a sweep: read its verdict from the study's store or this
machine's facts, or judge it by the probe; then its speed, and, under a memory limit, what fits."""

from __future__ import annotations

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
    key, facts = verdict_key(config, device)
    batch_size = config.training.batch_size
    record, speed = store.get(key), store.get(speed_key(key, batch_size))
    cached = record is not None and (speed is not None or not cached_verdict(record).ok)
    machine_key = signed.key(facts) if signed is not None else None
    known = signed.machine.get(machine_key) if signed is not None and not cached else None
    if known is not None:  # proved on this machine by an earlier study: into this study's store
        store.add(key, known["verdict"])
        if known.get("speed") is not None:
            store.add(speed_key(key, batch_size), known["speed"])
        record, speed, cached = known["verdict"], known.get("speed"), True
    implied = None if cached else implied_failure(store, _values(config), facts["device"])
    if implied is not None:
        return SweepRow(config.knobs.as_dict(), str(implied), None, None, None, None, None, cached=True)
    if not cached:
        try:
            # `hpo probe --fresh` proves an emulated precision again too (`hpo.verify.timing._emulated`).
            machine = signed.machine if signed is not None else None
            probe = run_probe(
                workload,
                config,
                device,
                store,
                references=references,
                policy=policy,
                keep_timed=warm is not None,
                machine=machine,
            )
        except Exception as exc:
            if is_sticky_device_error(exc):
                raise
            _log.warning(f"hpo probe: {knobs_text(config)} failed with an error (not a verdict):\n{short_traceback(exc)}")
            return error_row(config, exc)
        record, speed = keep_probe(store, key, facts, probe, batch_size)
        if probe.timed_model is not None:
            warm.offer(probe.timed_model, probe.peak_mem_mb)
        if signed is not None:
            signed.machine.put(machine_key, {"facts": facts, "verdict": record, "speed": speed})
    verdict = cached_verdict(record)
    if verdict.ok and speed is not None:
        verdict = cached_verdict(speed)
    step_ms = (speed or {}).get("trial_step_ms")
    ok = verdict.ok
    timed_now = None
    if known is not None and ok and step_ms and signed.confirm:
        timed_now = _timed_now(workload, config, device, policy)
    fit = memory_fit(workload, config, device, store, key, ceiling) if ok and ceiling is not None else None
    slowdown = (speed or {}).get("slowdown")
    steps_ms = (speed or {}).get("trial_steps_ms") if ok else None
    if timed_now is not None:  # the fact's ratio to the reference, carried over to the step timed now
        slowdown = None if slowdown is None else slowdown * timed_now.best_ms / step_ms
        step_ms, steps_ms = timed_now.best_ms, list(timed_now.times_ms)
    return SweepRow(
        knobs=config.knobs.as_dict(),
        verdict=str(verdict),
        samples_per_s=1000 * batch_size / step_ms if ok and step_ms else None,
        slowdown=slowdown,
        slowdown_at_least=bool((speed or {}).get("trial_step_stopped")),
        peak_mem_mb=record.get("peak_mem_mb"),
        loss_rel_err=record.get("loss_rel_err"),
        grad_rel_err=record.get("grad_rel_err"),
        loss_bound=record.get("loss_bound"),
        grad_bound=record.get("grad_bound"),
        cached=cached,
        machine_key=machine_key,
        from_machine=known is not None,
        known_ms=(known or {}).get("raced_ms"),
        fact_at=(known or {}).get("at"),
        timed_now=timed_now is not None,
        steps_ms=steps_ms,
        predicted_peak_mb=fit.predicted_peak_mb if fit else None,
        largest_batch=fit.largest_batch if fit else None,
    )


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
