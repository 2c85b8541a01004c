"""Run one trial config: verify its knobs (probe or cached verdict), train, and say what ran.

Used by the Optuna objective and by `hpo train`; it knows nothing about Optuna.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from dataclasses import dataclass, field

import torch

from hpo import __version__
from hpo.config.trial import TrialConfig
from hpo.engine.assembly import AssembledModel
from hpo.errors import KnobUnavailable, PrunedByPruner, TrialRejected
from hpo.hardware.probes import device_model
from hpo.hardware.runtime import resolve_device, seed_everything, trial_runtime
from hpo.trial.phases import Phases
from hpo.trial.speed import objective_values, speed_attrs
from hpo.trial.trainer import EvalCallback, TooSlow, train
from hpo.verdicts import Kind, Verdict
from hpo.verify.cache import VerdictStore, reference_key, verdict_key
from hpo.verify.classify import REFERENCE_KNOBS, classify_failure
from hpo.verify.compared import ReferenceFiles
from hpo.verify.probe import ProbeResult, run_probe
from hpo.verify.slow import SlowLimit
from hpo.workloads.registry import create_workload


@dataclass
class TrialOutcome:
    """`verdict` is `ok` or the reason the trial did not train normally; `values` only when ok."""

    verdict: Verdict
    values: list[float] | None
    attrs: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def pruned(self) -> bool:
        return self.verdict.kind is Kind.PRUNED


def _ended(verdict: Verdict, attrs: dict) -> TrialOutcome:
    """A trial that did not train normally; what its verdict implicates is recorded beside it."""
    if verdict.implicates:
        attrs["verdict_implicates"] = verdict.implicated_record()
    return TrialOutcome(verdict=verdict, values=None, attrs=attrs)


def cached_verdict(record: dict) -> Verdict:
    """A verdict cache record's verdict, with what it implicates (none in records before that)."""
    verdict = Verdict.parse(record["verdict"])
    return Verdict.make(verdict.kind, verdict.detail, Verdict.part_from_record(record.get("implicates", [])))


def execute(
    config: TrialConfig,
    verdicts: VerdictStore,
    on_eval: EvalCallback | None = None,
    phases: Phases | None = None,
    references: ReferenceFiles | None = None,
) -> TrialOutcome:
    """`phases` collects where the time went; the caller records it (`phases_s`) with its own phases.
    `references` keeps the probe's reference step for the worker's later probes of the same model."""
    phases = phases if phases is not None else Phases()
    device = resolve_device(config.device)
    attrs = {
        "config": config.to_dict(),
        "knobs_requested": config.knobs.as_dict(),
        "device": device_model(device),
        "torch_version": torch.__version__,
        "hpo_version": __version__,
    }
    key, facts = verdict_key(config, device)
    attrs["verdict_key"] = key
    cached = verdicts.get(key)
    if cached is not None and not cached_verdict(cached).ok:
        attrs.update(probe_s=0.0, probe_cached=True, slowdown=cached.get("slowdown"), knobs_observed=cached.get("observed", {}))
        return _ended(cached_verdict(cached), attrs)
    with trial_runtime(device) as runtime:
        attrs["runtime"] = runtime
        return _verify_and_train(config, device, verdicts, (key, facts), cached, attrs, on_eval, phases, references)


def _verify_and_train(config, device, verdicts, keyed, cached, attrs, on_eval, phases: Phases, references) -> TrialOutcome:
    key, facts = keyed
    start = time.perf_counter()
    assembled = None
    try:
        with phases("data"):
            workload = create_workload(config.workload, config.workload_options)
            workload.bind_training(dataclasses.asdict(config.training))
        attrs["trainer"] = workload.trainer
        own_loop = workload.trainer == "hpo"  # hpo's loop checks speed in training; Lightning's probe times it
        record = cached
        if cached is None:
            with phases("probe"):
                probe = run_probe(workload, config, device, verdicts, own_loop, timed=not own_loop, references=references)
            record = {**probe.record(), "knobs": facts["knobs"], "device": facts["device"]}
            verdicts.put(key, record)
            attrs.update(_probe_attrs(probe))
            if not probe.ok:
                attrs["knobs_observed"] = probe.observed
                return _ended(probe.verdict, attrs)
            assembled, probe.model = probe.model, None
        else:
            attrs.update(probe_s=0.0, probe_cached=True, slowdown=cached.get("slowdown"))
        if workload.trainer == "lightning":
            from hpo.trial.lightning_loop import lightning_precision, train_lightning  # imports Lightning

            seed_everything(config.seed)
            attrs["lightning_precision"] = lightning_precision(config.knobs.precision, device.type)
            result = train_lightning(workload, config, device, on_eval)
        else:
            if assembled is None:  # the verdict was cached: no probe built the model
                with phases("build"):
                    seed_everything(config.seed)  # the weights the probe's reference would start from
                    assembled = AssembledModel(workload, config.knobs, config.training, device)
            # Seeded again, so training draws the same dropout and batches whether the model was
            # built just now or handed on by the probe.
            seed_everything(config.seed)
            slow = _slow_limit(config, device, verdicts)
            try:
                result = train(assembled, config, on_eval, slow if config.skip_slow else None)
            except TooSlow as exc:  # cached, so no later trial trains these knobs again
                slowdown = slow.slowdown(exc.step_ms)
                verdicts.put(key, {**record, **_verdict_record(exc.verdict), "slowdown": slowdown, "trial_step_ms": exc.step_ms})
                attrs["slowdown"] = slowdown
                raise
            _record_speed(config, (key, record), verdicts, slow, result.fastest_step_ms, attrs)
            phases.add("train", result.train_s)
            phases.add("evidence", result.evidence_s)
            phases.add("eval", result.eval_s)
    except KnobUnavailable as exc:  # a knob found unusable while training (a Lightning module's optimizer)
        return _ended(exc.verdict, attrs)
    except TrialRejected as exc:
        attrs["knobs_observed"] = exc.observed or attrs.get("knobs_observed", {})
        return _ended(exc.verdict, attrs)
    except PrunedByPruner as exc:
        return _ended(Verdict(Kind.PRUNED, f"step {exc.step}"), attrs)
    except (torch.OutOfMemoryError, MemoryError) as exc:
        detail = str(exc).splitlines()[0][:200] if str(exc) else ""
        return _ended(Verdict(Kind.OOM, f"{type(exc).__name__}: {detail}".rstrip(": ")), attrs)
    except Exception as exc:  # noqa: BLE001 - recorded on the trial, with the knob it points at
        # An error while training is not a knob verdict (it may depend on the data or the lr): no implicates.
        return _ended(Verdict(Kind.ERROR, classify_failure(exc, config.knobs).detail), attrs)
    finally:
        del assembled
        _free_memory(device)
    attrs.update(
        knobs_observed=result.knobs_observed,
        train_samples_per_s=result.train_samples_per_s,
        step_time_ms=result.step_time_ms,
        peak_mem_mb=result.peak_mem_mb,
        n_params=result.n_params,
        metrics=result.metrics,
    )
    with phases("flops"):
        attrs.update(speed_attrs(workload, config, device, result, verdicts))
    attrs["trial_s"] = time.perf_counter() - start
    return TrialOutcome(verdict=Verdict(Kind.OK), values=objective_values(config, result, attrs), attrs=attrs)


def _slow_limit(config: TrialConfig, device: torch.device, verdicts: VerdictStore) -> SlowLimit | None:
    """The study's slow limit for this trial; None for the reference knobs themselves, or when no
    probe measured the reference's step yet (a verdict cached by an older version)."""
    reference_ms = (verdicts.get(reference_key(config, device)) or {}).get("step_ms")
    if reference_ms is None or config.knobs == REFERENCE_KNOBS:
        return None
    return SlowLimit(reference_ms, config.slow_ratio)


def _record_speed(config: TrialConfig, keyed: tuple[str, dict], verdicts, slow: SlowLimit | None, step_ms, attrs) -> None:
    """The trial's slowdown against the reference, on the trial and, the first time, in the verdict
    cache: `hpo probe` ranks a cached combination by it without timing it again."""
    key, record = keyed
    if step_ms is None:
        return
    slowdown = 1.0 if config.knobs == REFERENCE_KNOBS else None if slow is None else slow.slowdown(step_ms)
    attrs["slowdown"] = slowdown
    if slowdown is not None and record.get("slowdown") is None:
        speed = {"slowdown": slowdown, "trial_step_ms": step_ms, "batch_size": config.training.batch_size}
        verdicts.put(key, {**record, **speed})


def _verdict_record(verdict: Verdict) -> dict:
    return {"verdict": str(verdict), "implicates": verdict.implicated_record()}


def _probe_attrs(probe: ProbeResult) -> dict:
    return {
        "probe_s": probe.probe_s,
        "probe_cached": False,
        "probe_reference_reused": probe.reference_reused,
        "slowdown": probe.slowdown,
        "probe_loss_rel_err": probe.loss_rel_err,
        "probe_grad_rel_err": probe.grad_rel_err,
    }


def _free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
