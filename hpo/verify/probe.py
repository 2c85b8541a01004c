"""Pre-trial compatibility probe: one real forward and backward with the trial's knobs, checked
against an fp32/eager/for-loop reference on the same samples and weights.

The verdict is `ok` or a knob verdict (`incompatible: <why>`), given only when the knobs are
proven at fault: a known upstream refusal (`hpo.verify.known_failures`), evidence that a knob ran
as something else, or a differential run in which the reference passes and the knobs fail, tried
value by value so that only the value or pair at fault is implicated (`hpo.verify.blame`). Anything
else is raised: an error, never a verdict. A timed probe also judges `slow` at the trial's batch.
Nothing is downgraded: the probe only decides whether the trial's own knobs may train.

Cost, since a trial pays it before every new knob combination:
- the compared step runs on `PROBE_SAMPLES` samples, not the trial's batch: numerics and kernel
  choice need real data, not much of it (a compiled model, specialised to its input shapes, is
  compared on the batch it will train on);
- the trial's model is handed on to train (`keep_model`), so a trial builds one model, not two;
- the reference's compared step (its loss, gradients and initial weights) depends on the model,
  not on the knobs: a worker's later probes of the same model read it from `references`
  (`hpo.verify.compared`) instead of building the reference and running it again;
- a trial's probe times nothing of the trial: its first steady training steps decide `slow`
  (`hpo.verify.slow`). Only the reference's step time is measured (`hpo.verify.reference`), once
  per model, batch size and device, and kept in the verdict store (the study's). `hpo probe` times
  the trial too (`timed`).
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from dataclasses import asdict, dataclass, field, replace

import torch

from hpo.config.trial import Knobs, TrialConfig
from hpo.engine.assembly import AssembledModel
from hpo.engine.flops import counting_flops
from hpo.engine.step import NonFiniteLoss, run_step
from hpo.errors import HpoError, KnobUnavailable, TrialRejected
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import mismatch_verdict, mismatches, observed_knobs
from hpo.hardware.memory import resident_bytes
from hpo.hardware.runtime import seed_everything
from hpo.torch_compat import foreach_div, foreach_norm, foreach_sub
from hpo.verdicts import Kind, Verdict
from hpo.verify.blame import isolate
from hpo.verify.cache import MemoryVerdicts, VerdictStore, flops_key, reference_key, speed_key
from hpo.verify.compared import ComparedReference, ReferenceFiles, compared_key
from hpo.verify.known_failures import is_sticky_device_error, match_known_failure
from hpo.verify.reference import time_reference
from hpo.verify.reference_knobs import REFERENCE_KNOBS, differing_from_reference
from hpo.verify.slow import SlowLimit
from hpo.verify.speed import TIMED_STEPS, fastest_step_ms, prove_slow
from hpo.verify.tolerances import TOLERANCES
from hpo.workloads.base import Batch, Workload

PROBE_SAMPLES = 4


@dataclass
class ProbeResult:
    verdict: Verdict
    loss_rel_err: float | None = None
    grad_rel_err: float | None = None
    slowdown: float | None = None
    reference_step_ms: float | None = None
    trial_step_ms: float | None = None
    peak_mem_mb: float | None = None  # the probe's own peak for the trial's model (see MemoryMeter)
    observed: dict = field(default_factory=dict)
    probe_s: float = 0.0
    reference_reused: bool = False  # the reference's compared step was read from an earlier probe's
    # How the verdict was proven: "contract" (a known upstream failure), "evidence" (a knob ran as
    # something else), "differential" (the reference passes where these knobs fail). None when ok.
    blame: str | None = None
    # A timed probe's `slow` verdict at the trial's batch size, apart from `verdict`: compatibility
    # holds at every batch size, speed is judged per batch size (`hpo.verify.cache.speed_key`).
    slow: Verdict | None = None
    # With `keep_model`, a passing probe's trial model, restarted at its initial weights: the
    # trial trains it instead of building its own. Never part of the record.
    model: AssembledModel | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    def record(self) -> dict:
        """The cache's record: the verdict as its readable string, with what it implicates."""
        record = asdict(replace(self, model=None, slow=None))  # a model is no record: never copied into one
        del record["model"], record["slow"]
        record["verdict"], record["implicates"] = str(self.verdict), self.verdict.implicated_record()
        return record

    def speed_record(self, batch_size: int) -> dict | None:
        """The speed fact at `batch_size` a timed probe measured, for `hpo.verify.cache.speed_key`."""
        if self.trial_step_ms is None or not self.ok:
            return None
        verdict = self.slow or Verdict(Kind.OK)
        return speed_fact(verdict, self.slowdown, self.trial_step_ms, batch_size)


def speed_fact(verdict: Verdict, slowdown: float | None, step_ms: float, batch_size: int) -> dict:
    return {
        "verdict": str(verdict),
        "implicates": verdict.implicated_record(),
        "slowdown": slowdown,
        "trial_step_ms": step_ms,
        "batch_size": batch_size,
    }


def keep_probe(store: VerdictStore, key: str, facts: dict, probe: ProbeResult, batch_size: int) -> tuple[dict, dict | None]:
    """Record a probe's facts, each insert-if-absent under its own key: its verdict (`key`) and, when
    it was timed, its speed at `batch_size` (`speed_key`). Returns both records."""
    record = {**probe.record(), "knobs": facts["knobs"], "device": facts["device"]}
    store.add(key, record)
    speed = probe.speed_record(batch_size)
    if speed is not None:
        store.add(speed_key(key, batch_size), speed)
    return record, speed


class NotReproduced(HpoError):
    """The trial's knobs failed the probe once, and passed when the same step was repeated: the
    failure proves nothing about the knobs, so it is an error, never a verdict."""


@dataclass
class _Failure:
    """A failed attempt. `verdict` is set when the failure itself proves the knobs at fault (a
    known upstream refusal, evidence of another kernel); else a differential run must."""

    detail: str
    verdict: Verdict | None = None
    blame: str | None = None
    error: BaseException | None = None


def run_probe(
    workload: Workload,
    config: TrialConfig,
    device: torch.device,
    store: VerdictStore | None = None,
    keep_model: bool = False,
    timed: bool = True,
    references: ReferenceFiles | None = None,
) -> ProbeResult:
    """Probe the trial's knobs. `store` keeps the reference's step time between probes;
    `keep_model` hands a passing probe's trial model on for training (see ProbeResult.model);
    `timed` also times the trial's steps for its slowdown and `slow` verdict (`hpo probe`, which
    trains nothing); untimed, only the reference's step time is measured, if no store has it.
    `references` keeps the reference's compared step for the next probe of the same model.

    Only the trial's own knobs can earn a verdict. The data fetch and the reference's step run
    outside any verdict: their exceptions propagate (an error, never the knobs' fault), as do out
    of memory (the trial's size) and a failure that does not repeat (`NotReproduced`)."""
    start = time.perf_counter()
    store = store if store is not None else MemoryVerdicts()
    reference_ms = (store.get(reference_key(config, device)) or {}).get("step_ms")
    key = compared_key(workload, config, device, _compared_samples(config))
    # A reference still to be timed runs its compared step anyway: it warms the reference up, and
    # what the step added to the resident set sizes the memory its timing touches beforehand.
    kept = references.get(key, device) if references is not None and reference_ms is not None else None
    reused = kept is not None
    batch = next(workload.train_batches(config.training.batch_size, config.seed))
    compared = batch if config.knobs.compile else next(workload.train_batches(_compared_samples(config), config.seed))
    reference, compared_growth = None, 0
    if kept is None:
        reference, kept, compared_growth = _reference_step(workload, config, device, compared, store)
        if references is not None:
            references.put(key, kept)
    steps = _Steps(workload, config, device, kept, compared)
    trial, failure = steps.attempt(config.knobs, evidence=True)
    result = steps.result
    if failure is not None:
        result.peak_mem_mb = trial.memory.peak_mb if trial is not None else None
        trial = reference = None  # the differential run builds models of its own: not beside these
        gc.collect()
        result.verdict, result.blame = steps.blame(config.knobs, failure)
    else:
        if reference_ms is None:
            timing = time_reference(reference, batch, compared_growth, workload.samples_in(compared))
            store.put(reference_key(config, device), timing.record())
            reference_ms = timing.step_ms
        result.reference_step_ms = reference_ms
        if timed:
            _time_trial(result, trial, steps, batch, config, reference_ms)
    if trial is not None:
        result.peak_mem_mb = trial.memory.peak_mb
    if keep_model and result.ok and trial is not None:
        initial = kept.initial
        reference = kept = steps = None  # before training starts: the trial's peak memory is its own
        trial.restart(initial)
        result.model = trial
    result.reference_reused = reused
    result.probe_s = time.perf_counter() - start
    return result


class _Steps:
    """The compared step under any knobs, from the reference's initial weights on the compared
    samples, judged against the reference's loss and gradients."""

    def __init__(self, workload: Workload, config: TrialConfig, device: torch.device, kept: ComparedReference, compared: Batch):
        self.workload, self.config, self.device, self.kept, self.compared = workload, config, device, kept, compared
        self.result = ProbeResult(verdict=Verdict(Kind.OK))

    def attempt(self, knobs: Knobs, evidence: bool = False) -> tuple[AssembledModel | None, _Failure | None]:
        """The knobs' model after the compared step and its update, or the failure. Records the
        errors and (with `evidence`) what ran into `self.result`."""
        trial = None
        try:
            trial = AssembledModel(self.workload, knobs, self.config.training, self.device)
            trial.model.load_state_dict(self.kept.initial)
            # The capture covers forward and backward (profiling the optimizer too doubled its
            # cost); the optimizer path is observed in training.
            with capture_step(trial) if evidence else contextlib.nullcontext() as seen:
                loss, grads = _loss_and_grads(trial, trial.move(self.compared))
            failure = self._compare(knobs, loss, grads)
            if failure is not None:
                return trial, failure
            # The compared step's update, after the comparison (gradient clipping would change the
            # gradients in place): it runs the optimizer knob, and creates its state before timing.
            trial.optimizer_step()
            trial.check_scaler(step=0)
        except (KnobUnavailable, TrialRejected) as exc:
            return trial, _Failure(str(exc.verdict), exc.verdict, "contract")
        except NonFiniteLoss as exc:
            return trial, _Failure(f"non-finite loss {exc.loss}")
        except (torch.OutOfMemoryError, MemoryError):
            raise  # out of memory is about this trial's size, not about the knobs: the trial records it
        except Exception as exc:
            if is_sticky_device_error(exc):
                raise  # the device is unusable until this process ends: an error, never the knobs'
            known = match_known_failure(exc, knobs)
            return trial, _Failure(f"{type(exc).__name__}: {_first_line(exc)}", known, "contract" if known else None, exc)
        if evidence:
            self.result.observed = observed_knobs(seen)
            problems = mismatches(knobs, self.result.observed)
            if problems:
                verdict = mismatch_verdict(Kind.INCOMPATIBLE, problems, knobs, prefix="ran other than asked: ")
                return trial, _Failure(str(verdict), verdict, "evidence")
        return trial, None

    def _compare(self, knobs: Knobs, loss: float, grads: list[torch.Tensor]) -> _Failure | None:
        precision = knobs.precision
        if not math.isfinite(loss):
            return _Failure(f"non-finite loss {loss} under {precision}")
        if not _all_finite(grads):
            return _Failure(f"non-finite gradients under {precision} (overflow)")
        loss_err = abs(loss - self.kept.loss) / max(abs(self.kept.loss), 1e-12)
        # Norms per tensor with foreach kernels, then of those: one pass, no Python loop over tensors.
        diff = _global_norm(foreach_sub(grads, self.kept.grads))
        grad_err = (diff / _global_norm(self.kept.grads).clamp_min(1e-12)).item()
        if knobs == self.config.knobs:
            self.result.loss_rel_err, self.result.grad_rel_err = loss_err, grad_err
        tol = TOLERANCES[precision]
        if loss_err > tol.loss:
            return _Failure(f"loss differs from fp32/eager by {loss_err:.3g} (tolerance {tol.loss} for {precision})")
        if grad_err > tol.grad:
            return _Failure(f"gradients differ from fp32/eager by {grad_err:.3g} (tolerance {tol.grad} for {precision})")
        return None

    def verdict_of(self, knobs: Knobs) -> Verdict | None:
        """None if the compared step passes under `knobs`, else the verdict its failure earns."""
        _, failure = self.attempt(knobs)
        if failure is None:
            return None
        if failure.verdict is not None:
            return failure.verdict
        return Verdict.make(Kind.INCOMPATIBLE, f"{failure.detail} ({_where(knobs)})", differing_from_reference(knobs))

    def blame(self, knobs: Knobs, failure: _Failure) -> tuple[Verdict, str]:
        """The verdict `failure` proves, and how: its own contract or evidence, else a
        differential run; a failure that proves nothing is raised (see `run_probe`)."""
        if failure.verdict is not None:
            return failure.verdict, failure.blame or "contract"
        if knobs == REFERENCE_KNOBS:  # nothing differs from the reference, which passed: not the knobs
            _raise(failure)
        verdict = isolate(knobs, self.verdict_of)
        if verdict is None:
            _raise(failure)
        return verdict, "differential"


def _raise(failure: _Failure) -> None:
    if failure.error is not None:
        raise failure.error
    raise NotReproduced(f"the probe's step failed once ({failure.detail}) and passed when repeated: not the knobs' fault")


def _where(knobs: Knobs) -> str:
    values = ", ".join(f"{k}={v}" for k, v in differing_from_reference(knobs))
    return f"fails with {values}; passes with fp32/eager/for-loop"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


def _compared_samples(config: TrialConfig) -> int:
    """A compiled model, specialised to its input shapes, is compared on the batch it will train on."""
    batch_size = config.training.batch_size
    return batch_size if config.knobs.compile else min(PROBE_SAMPLES, batch_size)


def _reference_step(
    workload: Workload, config: TrialConfig, device: torch.device, compared: Batch, store: VerdictStore
) -> tuple[AssembledModel, ComparedReference, int]:
    """Build the reference and run its compared step, without an update (the reference is
    compared, not trained). Returns it, its compared step, and what that step added to the
    resident set. The step also counts the model's FLOPs per sample into `store`, when the study
    has no count yet and the step is a small one: the reference is the plain eager fp32 model
    the count needs (`hpo.engine.flops`), so the trial's speed record need not build another."""
    seed_everything(config.seed)
    reference = AssembledModel(workload, REFERENCE_KNOBS, config.training, device)
    initial = {k: v.detach().clone() for k, v in reference.model.state_dict().items()}
    samples = workload.samples_in(compared)
    count = samples <= PROBE_SAMPLES and store.get(flops_key(config, device)) is None
    resident = resident_bytes()
    with counting_flops() if count else contextlib.nullcontext() as flops:
        loss, grads = _loss_and_grads(reference, reference.move(compared))
    growth = resident_bytes() - resident
    if count:
        store.put(flops_key(config, device), {"model_flops_per_sample": flops.total / samples})
    return reference, ComparedReference(loss, grads, initial), growth


def _loss_and_grads(assembled: AssembledModel, batch: Batch) -> tuple[float, list[torch.Tensor]]:
    """The compared step, without an update: its loss and unscaled gradients, which stay on the
    parameters as well (the trial's update then runs on them)."""
    # Dropout off: the comparison must see the same function. The model stays in eval mode for the
    # timed steps too, so a compiled model is not recompiled for train mode mid-measurement.
    assembled.model.eval()
    loss = run_step(assembled, batch, step=0, update=False)
    scale = assembled.scaler.get_scale() if assembled.scaler else 1.0
    grads = [
        p.grad.detach().float() if p.grad is not None else torch.zeros_like(p, dtype=torch.float32)
        for p in assembled.model.parameters()
    ]
    if scale != 1.0:  # fp16's loss scale; a copy, since the update unscales the gradients in place
        grads = foreach_div(grads, scale)
    return loss.float().item(), grads


def _global_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack(foreach_norm(tensors)))


def _all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every element is finite. A NaN or an infinity makes its tensor's norm non-finite, so
    finite norms prove it in one foreach pass; a norm that overflowed from finite values is rare
    and checked element by element."""
    if not tensors or bool(torch.isfinite(torch.stack(foreach_norm(tensors))).all()):
        return True
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def _time_trial(
    result: ProbeResult, trial: AssembledModel, steps: _Steps, batch: Batch, config: TrialConfig, reference_ms: float
) -> None:
    if config.knobs == REFERENCE_KNOBS:
        result.slowdown = 1.0  # the reference itself: timing it against itself would only measure noise
        result.trial_step_ms = reference_ms
        return
    limit = SlowLimit(reference_ms, config.slow_ratio, config.training.batch_size)
    result.trial_step_ms = fastest_step_ms(trial, batch, TIMED_STEPS, budget_ms=reference_ms * config.slow_ratio)
    result.slowdown = limit.slowdown(result.trial_step_ms)
    if config.skip_slow and limit.verdict(config.knobs, result.trial_step_ms) is not None:
        result.slow = prove_slow(steps.workload, config, steps.device, limit)
