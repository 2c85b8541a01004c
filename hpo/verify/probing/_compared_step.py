"""The probe's compared step under any knobs: from the reference's initial weights, on the compared
samples, judged against the reference's loss and gradients (`hpo.verify.tolerances`); and how a
failure is blamed on the knobs (its own contract or evidence, else a differential run), or raised."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from hpo.config.trial import Knobs, TrialConfig
from hpo.engine import AssembledModel, NonFiniteLoss, run_step
from hpo.errors import HpoError, KnobUnavailable, TrialRejected, real_cause
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import mismatch_verdict, mismatches, observed_knobs
from hpo.hardware import is_out_of_memory
from hpo.knobs.adamw_builders import learning_rate_zero
from hpo.knobs.registry import PRECISION_SPECS
from hpo.torch_compat import foreach_div, foreach_norm
from hpo.verdicts import Kind, Verdict
from hpo.verify.fault import REFERENCE_KNOBS, differing_from_reference, is_sticky_device_error, isolate, match_known_failure
from hpo.verify.probing._bounds import NO_FLOOR, Errors, NumericBound, bound_from_floor, relative_errors
from hpo.verify.probing._dropout_off import train_mode_without_dropout
from hpo.verify.probing._kept_reference import ComparedReference
from hpo.verify.probing._result import ProbeResult
from hpo.verify.probing._rounding import FP32_MANTISSA_BITS, RoundedTo
from hpo.workloads.base import Batch, Workload

__all__ = ["ComparedSteps", "NotReproduced", "backed_off", "loss_and_grads", "rounding_floor"]

SCALE_BACKOFF = 2.0**-4  # GradScaler's own backoff (0.5 a skipped step), four steps at a time


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


class ComparedSteps:
    """The compared step under any knobs, from the reference's initial weights on the compared
    samples, judged against the reference's loss and gradients. `reference`, the reference's model
    when the probe has just built it, measures the model's rounding floors without another build."""

    def __init__(
        self,
        workload: Workload,
        config: TrialConfig,
        device: torch.device,
        kept: ComparedReference,
        compared: Batch,
        reference: AssembledModel | None = None,
    ):
        self.workload, self.config, self.device, self.kept, self.compared = workload, config, device, kept, compared
        self.reference = reference
        self.result = ProbeResult(verdict=Verdict(Kind.OK))

    def bound(self, precision: str) -> NumericBound:
        """The bound for `precision` on this model, from its rounding floor, measured once per model
        and precision and kept with the reference (`ComparedReference.floors`)."""
        if precision not in self.kept.floors:
            self.kept.floors[precision] = self._measure_floor(precision)
        return bound_from_floor(precision, self.kept.floors[precision])

    def _measure_floor(self, precision: str) -> Errors:
        if PRECISION_SPECS[precision].mantissa_bits >= FP32_MANTISSA_BITS:
            return NO_FLOOR
        if self.reference is not None:  # built by this probe: `kept` is its plain step on these samples
            return rounding_floor(self.reference, self.reference.move(self.compared), precision, plain=self.kept)
        # The reference was read from an earlier probe: build its model again.
        model = AssembledModel(self.workload, REFERENCE_KNOBS, self.config.training, self.device)
        model.model.load_state_dict(self.kept.initial)
        return rounding_floor(model, model.move(self.compared), precision)

    def attempt(self, knobs: Knobs, evidence: bool = False) -> tuple[AssembledModel | None, _Failure | None]:
        """The knobs' model after the compared step and its update, or the failure. Records the
        errors and (with `evidence`) what ran into `self.result`."""
        trial = None
        try:
            trial = AssembledModel(self.workload, knobs, self.config.training, self.device)
            seen, failure = self._step(trial, knobs, evidence)
        except (KnobUnavailable, TrialRejected) as exc:
            return trial, _Failure(str(exc.verdict), exc.verdict, "contract")
        except NonFiniteLoss as exc:
            return trial, _Failure(f"non-finite loss {exc.loss}")
        except Exception as exc:
            # Out of memory (the trial's size: it records it), a sticky device error (until the process ends): not the knobs'
            if is_out_of_memory(exc) or is_sticky_device_error(exc):
                raise
            known, cause = match_known_failure(exc, knobs), real_cause(exc)  # not Dynamo's wrapper
            return trial, _Failure(f"{type(cause).__name__}: {_first_line(cause)}", known, "contract" if known else None, exc)
        if failure is None and evidence:
            failure = self._ran_other(knobs, observed_knobs(seen))
        return trial, failure

    def _step(self, trial: AssembledModel, knobs: Knobs, evidence: bool):
        """The compared step on `trial` from the reference's initial weights, compared; then its update.
        Returns what the profiler saw (with `evidence`) and the comparison's failure, if any."""
        trial.model.load_state_dict(self.kept.initial)
        # The capture covers forward and backward (profiling the optimizer too doubled its
        # cost); the optimizer path is observed in training.
        batch = trial.move(self.compared)
        with capture_step(trial) if evidence else contextlib.nullcontext() as seen:
            loss, grads = loss_and_grads(trial, batch)
        loss, grads = backed_off(trial, batch, loss, grads)
        failure = self._compare(knobs, loss, grads)
        if failure is not None:
            return seen, failure
        # The compared step's update, after the comparison (gradient clipping would change the
        # gradients in place), at learning rate 0: it runs the optimizer knob's own kernels
        # (and their refusals) and moves no weight, so training starts from these weights
        # with no copy of them restored.
        with learning_rate_zero(trial.optimizer):
            trial.optimizer_step()
        trial.check_scaler(step=0)
        return seen, None

    def _ran_other(self, knobs: Knobs, observed: dict) -> _Failure | None:
        """What ran, recorded; a failure when it contradicts the knobs."""
        self.result.observed = observed
        problems = mismatches(knobs, observed)
        if not problems:
            return None
        verdict = mismatch_verdict(Kind.INCOMPATIBLE, problems, knobs, prefix="ran other than asked: ")
        return _Failure(str(verdict), verdict, "evidence")

    def _compare(self, knobs: Knobs, loss: float, grads: list[torch.Tensor]) -> _Failure | None:
        precision = knobs.precision
        if not math.isfinite(loss):
            return _Failure(f"non-finite loss {loss} under {precision}")
        if not _all_finite(grads):
            return _Failure(f"non-finite gradients under {precision} (overflow)")
        if self.kept.ran_other is not None:
            # Not the reference: an error against it measures nothing (sdpa "against eager" read
            # exactly 0 where both had run SDPA). Unjudged, and said so.
            self.result.numerics_not_judged = self.kept.ran_other
            return None
        errors = relative_errors(loss, grads, self.kept.loss, self.kept.grads)
        bound = self.bound(precision)
        if knobs == self.config.knobs:
            self.result.record_numerics(errors, bound)
        problem = bound.exceeded_by(errors)
        return None if problem is None else _Failure(problem)

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


def backed_off(trial: AssembledModel, batch: Batch, loss: float, grads: list[torch.Tensor]) -> tuple[float, list[torch.Tensor]]:
    """The compared step again at a smaller loss scale while fp16's scaled gradients overflow and
    its loss does not, as GradScaler backs off in training by skipping steps: an overflow at the
    first scale is how loss scaling works, not a fault of fp16 (transformers' BatchNorm ResNet
    overflows at 2^16 and trains at 2^12). SCALE_BACKOFF per try reaches a scale of 1 from 2^16 in
    four tries; training goes on from the scale found."""
    scaler = trial.scaler
    while scaler is not None and math.isfinite(loss) and not _all_finite(grads) and scaler.get_scale() > 1.0:
        scaler.update(max(scaler.get_scale() * SCALE_BACKOFF, 1.0))
        for p in trial.model.parameters():
            p.grad = None
        loss, grads = loss_and_grads(trial, batch)
    return loss, grads


def loss_and_grads(assembled: AssembledModel, batch: Batch) -> tuple[float, list[torch.Tensor]]:
    """The compared step, without an update: its loss and unscaled gradients, which stay on the
    parameters as well (the trial's update then runs on them). In train mode, the mode training
    runs in, with dropout off: the comparison must see the same function (`hpo.verify.probing._dropout_off`)."""
    with train_mode_without_dropout(assembled.model):
        loss = run_step(assembled, batch, step=0, update=False)
    scale = assembled.scaler.get_scale() if assembled.scaler else 1.0
    grads = [
        p.grad.detach().float() if p.grad is not None else torch.zeros_like(p, dtype=torch.float32)
        for p in assembled.model.parameters()
    ]
    if scale != 1.0:  # fp16's loss scale; a copy, since the update unscales the gradients in place
        grads = foreach_div(grads, scale)
    return loss.float().item(), grads


def _all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every element is finite. A NaN or an infinity makes its tensor's norm non-finite, so
    finite norms prove it in one foreach pass; a norm that overflowed from finite values is rare
    and checked element by element."""
    if not tensors or bool(torch.isfinite(torch.stack(foreach_norm(tensors))).all()):
        return True
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def rounding_floor(reference: AssembledModel, batch: Batch, precision: str, plain: ComparedReference | None = None) -> Errors:
    """The reference model's errors against its own plain fp32 step on `batch` when every value it
    computes is rounded to `precision`'s mantissa (`hpo.verify.probing._rounding`): what rounding alone
    explains on this model. The plain step runs here too, from the weights `reference` holds, unless
    `plain` is that very step (the reference has just run it), so a floor owes nothing to a kept
    reference it will judge a trial against. The gradients are left on no parameter."""
    parameters = list(reference.model.parameters())
    runs = [] if plain is None else [(plain.loss, plain.grads)]
    for rounding in ([contextlib.nullcontext()] if plain is None else []) + [RoundedTo(PRECISION_SPECS[precision].mantissa_bits)]:
        for p in parameters:
            p.grad = None  # a new gradient, never accumulated into the plain step's (`plain.grads`)
        with rounding:
            runs.append(loss_and_grads(reference, batch))
    for p in parameters:
        p.grad = None
    (loss, grads), (rounded_loss, rounded_grads) = runs
    return relative_errors(rounded_loss, rounded_grads, loss, grads)
