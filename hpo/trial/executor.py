"""Run one trial config: verify its knobs (probe or cached verdict), train, and say what ran.

Used by the Optuna objective and by `hpo train`; it knows nothing about Optuna. A verdict is the
outcome only when the knobs are proven at fault (`hpo.verify.probe`, `hpo.verify.speed`); any other
failure is raised as `TrialError`, with the trial's attrs and its traceback, and caches nothing.
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
from hpo.errors import KnobUnavailable, PrunedByPruner, TrialError, TrialRejected, error_verdict, short_traceback
from hpo.hardware.probes import device_model
from hpo.hardware.runtime import resolve_device, seed_everything, trial_runtime
from hpo.trial.phases import Phases
from hpo.trial.speed import objective_values, speed_attrs
from hpo.trial.trainer import EvalCallback, TooSlow, train
from hpo.verdicts import Kind, Verdict
from hpo.verify.cache import VerdictStore, reference_key, speed_key, verdict_key
from hpo.verify.compared import ReferenceFiles
from hpo.verify.probe import ProbeResult, keep_probe, run_probe, speed_fact
from hpo.verify.reference_knobs import REFERENCE_KNOBS
from hpo.verify.slow import SlowLimit
from hpo.verify.speed import prove_slow
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


def known_verdict(verdicts: VerdictStore, key: str, batch_size: int) -> Verdict | None:
    """The cached verdict that rules the combination out at this batch size, if any: its probe's
    (any batch size) or its speed fact's (this batch size)."""
    for record in (verdicts.get(key), verdicts.get(speed_key(key, batch_size))):
        if record is not None and not cached_verdict(record).ok:
            return cached_verdict(record)
    return None


def execute(
    config: TrialConfig,
    verdicts: VerdictStore,
    on_eval: EvalCallback | None = None,
    phases: Phases | None = None,
    references: ReferenceFiles | None = None,
) -> TrialOutcome:
    """Verify the knobs (a cached verdict, or the probe), train, and say what ran. A knob verdict,
    divergence, OOM or pruning is the outcome; any other failure raises TrialError.
    `phases` collects where the time went; the caller records it (`phases_s`) with its own phases.
    `references` keeps the probe's reference step for the worker's later probes of the same model."""
    run = _TrialRun(config, verdicts, on_eval, phases if phases is not None else Phases(), references)
    cached = known_verdict(verdicts, run.key, config.training.batch_size)
    if cached is not None:
        # Nothing ran here: what the cached verdict's own trial observed is not this trial's.
        run.attrs.update(probe_s=0.0, probe_cached=True, verdict_from_cache=True, knobs_observed={})
        return _ended(cached, run.attrs)
    with trial_runtime(run.device) as runtime:
        run.attrs["runtime"] = runtime
        return run.verify_and_train()


class _TrialRun:
    def __init__(self, config: TrialConfig, verdicts: VerdictStore, on_eval, phases: Phases, references):
        self.config, self.verdicts, self.on_eval, self.phases, self.references = config, verdicts, on_eval, phases, references
        self.device = resolve_device(config.device)
        self.key, self.facts = verdict_key(config, self.device)
        self.attrs = {
            "config": config.to_dict(),
            "knobs_requested": config.knobs.as_dict(),
            "device": device_model(self.device),
            "torch_version": torch.__version__,
            "hpo_version": __version__,
            "verdict_key": self.key,
        }

    def verify_and_train(self) -> TrialOutcome:
        try:
            return self._verify_and_train()
        except KnobUnavailable as exc:  # a knob found unusable while training (a Lightning module's optimizer)
            return _ended(exc.verdict, self.attrs)
        except TooSlow as exc:
            return self._slow(exc)
        except TrialRejected as exc:
            self.attrs["knobs_observed"] = exc.observed or self.attrs.get("knobs_observed", {})
            return _ended(exc.verdict, self.attrs)
        except PrunedByPruner as exc:
            return _ended(Verdict(Kind.PRUNED, f"step {exc.step}"), self.attrs)
        except (torch.OutOfMemoryError, MemoryError) as exc:
            detail = str(exc).splitlines()[0][:200] if str(exc) else ""
            return _ended(Verdict(Kind.OOM, f"{type(exc).__name__}: {detail}".rstrip(": ")), self.attrs)
        except Exception as exc:
            # Not proven to be the knobs' (it may be the workload, the data or the device): an
            # error, with its traceback, and nothing cached.
            self.attrs["error_traceback"] = short_traceback(exc)
            raise TrialError(error_verdict(exc), self.attrs) from exc
        finally:
            _free_memory(self.device)

    def _verify_and_train(self) -> TrialOutcome:
        config, device, phases, attrs = self.config, self.device, self.phases, self.attrs
        start = time.perf_counter()
        with phases("data"):
            workload = create_workload(config.workload, config.workload_options)
            workload.bind_training(dataclasses.asdict(config.training))
        self.workload = workload
        attrs["trainer"] = workload.trainer
        own_loop = workload.trainer == "hpo"  # hpo's loop checks speed in training; Lightning's probe times it
        assembled = None
        if self.verdicts.get(self.key) is None:
            with phases("probe"):
                probe = run_probe(
                    workload, config, device, self.verdicts, own_loop, timed=not own_loop, references=self.references
                )
            keep_probe(self.verdicts, self.key, self.facts, probe, config.training.batch_size)
            attrs.update(_probe_attrs(probe))
            verdict = probe.slow if probe.ok and probe.slow is not None else probe.verdict
            if not verdict.ok:
                attrs["knobs_observed"] = probe.observed
                return _ended(verdict, attrs)
            assembled, probe.model = probe.model, None
        else:
            attrs.update(probe_s=0.0, probe_cached=True)
        if workload.trainer == "lightning":
            from hpo.trial.lightning_loop import lightning_precision, train_lightning  # imports Lightning

            seed_everything(config.seed)
            attrs["lightning_precision"] = lightning_precision(config.knobs.precision, device.type)
            result = train_lightning(workload, config, device, self.on_eval)
        else:
            if assembled is None:  # the verdict was cached: no probe built the model
                with phases("build"):
                    seed_everything(config.seed)  # the weights the probe's reference would start from
                    assembled = AssembledModel(workload, config.knobs, config.training, device)
            # Seeded again, so training draws the same dropout and batches whether the model was
            # built just now or handed on by the probe.
            seed_everything(config.seed)
            self.slow_limit = _slow_limit(config, device, self.verdicts)
            try:
                result = train(assembled, config, self.on_eval, self.slow_limit if config.skip_slow else None)
            finally:
                del assembled  # before a slow verdict times other knobs, and before the next trial
            self._record_speed(result.fastest_step_ms)
            phases.add("train", result.train_s)
            phases.add("evidence", result.evidence_s)
            phases.add("eval", result.eval_s)
        attrs.update(
            knobs_observed=result.knobs_observed,
            train_samples_per_s=result.train_samples_per_s,
            step_time_ms=result.step_time_ms,
            peak_mem_mb=result.peak_mem_mb,
            n_params=result.n_params,
            metrics=result.metrics,
        )
        with phases("flops"):
            attrs.update(speed_attrs(workload, config, device, result, self.verdicts))
        attrs["trial_s"] = time.perf_counter() - start
        return TrialOutcome(verdict=Verdict(Kind.OK), values=objective_values(config, result, attrs), attrs=attrs)

    def _slow(self, exc: TooSlow) -> TrialOutcome:
        """The trial's first steady steps were too slow. Cached, implicating only the values that
        are slow on their own when timed (`prove_slow`); when the whole combination is not slow
        when timed again, the trial still ends slow, but nothing is cached or avoided."""
        limit, batch_size = self.slow_limit, self.config.training.batch_size
        slowdown = limit.slowdown(exc.step_ms)
        self.attrs.update(slowdown=slowdown, knobs_observed=exc.observed)
        _free_memory(self.device)
        with self.phases("probe"):
            proven = prove_slow(self.workload, self.config, self.device, limit)
        if proven is None:
            detail = f"{exc.verdict.detail}; not slow when timed again, so nothing is cached"
            return _ended(Verdict(Kind.SLOW, detail), self.attrs)
        self.verdicts.add(speed_key(self.key, batch_size), speed_fact(proven, slowdown, exc.step_ms, batch_size))
        return _ended(proven, self.attrs)

    def _record_speed(self, step_ms: float | None) -> None:
        """The trial's slowdown against the reference, on the trial and, if no worker recorded one
        yet at this batch size, in the verdict cache: `hpo probe` ranks a cached combination by it
        without timing it again."""
        config, slow = self.config, self.slow_limit
        if step_ms is None:
            return
        slowdown = 1.0 if config.knobs == REFERENCE_KNOBS else None if slow is None else slow.slowdown(step_ms)
        self.attrs["slowdown"] = slowdown
        if slowdown is not None:
            batch_size = config.training.batch_size
            self.verdicts.add(speed_key(self.key, batch_size), speed_fact(Verdict(Kind.OK), slowdown, step_ms, batch_size))


def _slow_limit(config: TrialConfig, device: torch.device, verdicts: VerdictStore) -> SlowLimit | None:
    """The study's slow limit for this trial; None for the reference knobs themselves, or when no
    probe measured the reference's step yet (a verdict cached by an older version)."""
    reference_ms = (verdicts.get(reference_key(config, device)) or {}).get("step_ms")
    if reference_ms is None or config.knobs == REFERENCE_KNOBS:
        return None
    return SlowLimit(reference_ms, config.slow_ratio, config.training.batch_size)


def _probe_attrs(probe: ProbeResult) -> dict:
    return {
        "probe_s": probe.probe_s,
        "probe_cached": False,
        "probe_reference_reused": probe.reference_reused,
        "probe_blame": probe.blame,
        "slowdown": probe.slowdown,
        "probe_loss_rel_err": probe.loss_rel_err,
        "probe_grad_rel_err": probe.grad_rel_err,
    }


def _free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
