"""Pre-trial compatibility probe: one real forward and backward with the trial's knobs, checked
against an fp32/eager/for-loop reference on the same samples and weights.

The verdict is `ok`, `incompatible: <why>` or, when the probe is timed, `slow: <ratio>x ...`. Nothing
is downgraded: the probe only decides whether the trial's own knobs may train.

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
import time
from dataclasses import asdict, dataclass, field, replace

import torch

from hpo.config.trial import Knobs, TrialConfig
from hpo.engine.assembly import AssembledModel
from hpo.engine.flops import counting_flops
from hpo.engine.step import NonFiniteLoss, run_step
from hpo.errors import KnobUnavailable, TrialRejected
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import mismatch_verdict, mismatches, observed_knobs
from hpo.hardware.memory import resident_bytes
from hpo.hardware.runtime import seed_everything, synchronize
from hpo.verdicts import Kind, Verdict
from hpo.verify.cache import MemoryVerdicts, VerdictStore, flops_key, reference_key
from hpo.verify.classify import REFERENCE_KNOBS, classify_failure, differing_from_reference
from hpo.verify.compared import ComparedReference, ReferenceFiles, compared_key
from hpo.verify.reference import time_reference
from hpo.verify.slow import SlowLimit
from hpo.verify.tolerances import TOLERANCES
from hpo.workloads.base import Batch, Workload

TIMED_STEPS = 2  # `hpo probe`'s timing of a trial's knobs: the fastest of two
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
    # With `keep_model`, a passing probe's trial model, restarted at its initial weights: the
    # trial trains it instead of building its own. Never part of the record.
    model: AssembledModel | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    def record(self) -> dict:
        """The cache's record: the verdict as its readable string, with what it implicates."""
        record = asdict(replace(self, model=None))  # a model is no record: never copied into one
        del record["model"]
        record["verdict"], record["implicates"] = str(self.verdict), self.verdict.implicated_record()
        return record


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
    `references` keeps the reference's compared step for the next probe of the same model."""
    start = time.perf_counter()
    store = store if store is not None else MemoryVerdicts()
    reference_ms = (store.get(reference_key(config, device)) or {}).get("step_ms")
    key = compared_key(workload, config, device, _compared_samples(config))
    # Read before the knobs run, and outside their verdicts: a file that cannot be read is no
    # verdict on them, and a probe that ends in one still says which reference it compared with.
    # A reference still to be timed runs its compared step anyway: it warms the reference up, and
    # what the step added to the resident set sizes the memory its timing touches beforehand.
    kept = references.get(key, device) if references is not None and reference_ms is not None else None
    try:
        result = _probe(
            workload,
            config,
            device,
            store,
            references,
            kept,
            key=key,
            reference_ms=reference_ms,
            keep_model=keep_model,
            timed=timed,
        )
    except (KnobUnavailable, TrialRejected) as exc:
        result = ProbeResult(verdict=exc.verdict)
    except NonFiniteLoss as exc:  # under these knobs the model overflows on a batch fp32 handles
        detail = f"non-finite loss {exc.loss} under {config.knobs.precision}"
        result = ProbeResult(verdict=Verdict.make(Kind.INCOMPATIBLE, detail, [("precision", config.knobs.precision)]))
    except (torch.OutOfMemoryError, MemoryError):
        raise  # out of memory is about this trial's size, not about the knobs: the trial records it
    except Exception as exc:  # noqa: BLE001 - any failure of the knobs is the verdict itself
        result = ProbeResult(verdict=classify_failure(exc, config.knobs))
    result.reference_reused = kept is not None
    result.probe_s = time.perf_counter() - start
    return result


def _compared_samples(config: TrialConfig) -> int:
    """A compiled model, specialised to its input shapes, is compared on the batch it will train on."""
    batch_size = config.training.batch_size
    return batch_size if config.knobs.compile else min(PROBE_SAMPLES, batch_size)


def _probe(
    workload: Workload,
    config: TrialConfig,
    device: torch.device,
    store: VerdictStore,
    references: ReferenceFiles | None,
    kept: ComparedReference | None,
    *,
    key: str,
    reference_ms: float | None,
    keep_model: bool,
    timed: bool,
) -> ProbeResult:
    """`kept`: the reference's compared step read from `references` under `key`; None runs it
    here (and keeps it there). `reference_ms`: the reference's step time, None times it here."""
    seed = config.seed
    batch = next(workload.train_batches(config.training.batch_size, seed))
    compared = batch if config.knobs.compile else next(workload.train_batches(_compared_samples(config), seed))
    reference, compared_growth = None, 0
    if kept is None:
        reference, kept, compared_growth = _reference_step(workload, config, device, compared, store)
        if references is not None:
            references.put(key, kept)
    trial = AssembledModel(workload, config.knobs, config.training, device)
    trial.model.load_state_dict(kept.initial)
    # The capture covers forward and backward (profiling the optimizer too doubled its cost); the
    # optimizer path is observed in training, and recorded as null for a trial rejected here.
    with capture_step(trial) as evidence:
        loss, grads = _loss_and_grads(trial, trial.move(compared))
    result = _compare(config.knobs, loss, grads, kept.loss, kept.grads)
    # The compared step's update, after the comparison (gradient clipping would change the gradients
    # in place): it runs the optimizer knob, and creates its state before any timing.
    trial.optimizer_step()
    trial.check_scaler(step=0)
    result.observed = observed_knobs(evidence)
    problems = mismatches(config.knobs, result.observed)
    if result.ok and problems:
        result.verdict = mismatch_verdict(Kind.INCOMPATIBLE, problems, config.knobs, prefix="ran other than asked: ")
    if result.ok:
        if reference_ms is None:
            timing = time_reference(reference, batch, compared_growth, workload.samples_in(compared))
            store.put(reference_key(config, device), timing.record())
            reference_ms = timing.step_ms
        result.reference_step_ms = reference_ms
        if timed:
            _time_trial(result, trial, batch, config, reference_ms)
    result.peak_mem_mb = trial.memory.peak_mb
    if keep_model and result.ok:
        initial = kept.initial
        reference = kept = grads = None  # before training starts: the trial's peak memory is its own
        trial.restart(initial)
        result.model = trial
    return result


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
        grads = torch._foreach_div(grads, scale)
    return loss.float().item(), grads


def _compare(knobs: Knobs, loss: float, grads, ref_loss: float, ref_grads) -> ProbeResult:
    precision = knobs.precision
    overflow = [("precision", precision)]  # non-finite values: the model overflows this dtype
    if not torch.isfinite(torch.tensor(loss)):
        return ProbeResult(verdict=Verdict.make(Kind.INCOMPATIBLE, f"non-finite loss {loss} under {precision}", overflow))
    if not _all_finite(grads):
        detail = f"non-finite gradients under {precision} (overflow)"
        return ProbeResult(verdict=Verdict.make(Kind.INCOMPATIBLE, detail, overflow))
    loss_err = abs(loss - ref_loss) / max(abs(ref_loss), 1e-12)
    # Norms per tensor with foreach kernels, then of those: one pass, no Python loop over tensors.
    diff = _global_norm(torch._foreach_sub(grads, ref_grads))
    grad_err = (diff / _global_norm(ref_grads).clamp_min(1e-12)).item()
    tol = TOLERANCES[precision]
    result = ProbeResult(verdict=Verdict(Kind.OK), loss_rel_err=loss_err, grad_rel_err=grad_err)
    if loss_err > tol.loss:
        detail = f"loss differs from fp32/eager by {loss_err:.3g} (tolerance {tol.loss} for {precision})"
        result.verdict = Verdict.make(Kind.INCOMPATIBLE, detail, differing_from_reference(knobs))
    elif grad_err > tol.grad:
        detail = f"gradients differ from fp32/eager by {grad_err:.3g} (tolerance {tol.grad} for {precision})"
        result.verdict = Verdict.make(Kind.INCOMPATIBLE, detail, differing_from_reference(knobs))
    return result


def _global_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(tensors)))


def _all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every element is finite. A NaN or an infinity makes its tensor's norm non-finite, so
    finite norms prove it in one foreach pass; a norm that overflowed from finite values is rare
    and checked element by element."""
    if not tensors or bool(torch.isfinite(torch.stack(torch._foreach_norm(tensors))).all()):
        return True
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def _time_trial(result: ProbeResult, trial: AssembledModel, batch: Batch, config: TrialConfig, reference_ms: float) -> None:
    if config.knobs == REFERENCE_KNOBS:
        result.slowdown = 1.0  # the reference itself: timing it against itself would only measure noise
        result.trial_step_ms = reference_ms
        return
    limit = SlowLimit(reference_ms, config.slow_ratio)
    result.trial_step_ms = _fastest_step_ms(trial, batch, TIMED_STEPS, budget_ms=reference_ms * config.slow_ratio)
    result.slowdown = limit.slowdown(result.trial_step_ms)
    slow = limit.verdict(config.knobs, result.trial_step_ms) if config.skip_slow else None
    if slow is not None:
        result.verdict = slow


def _fastest_step_ms(assembled: AssembledModel, batch: Batch, steps: int, budget_ms: float) -> float:
    """Fastest of a few warm steps (noise only ever adds time); stops early once a step exceeds
    `budget_ms`, since one warm step that slow is proof enough."""
    moved = assembled.move(batch)
    times = []
    for step in range(1, steps + 1):
        synchronize(assembled.device)
        start = time.perf_counter()
        run_step(assembled, moved, step)
        synchronize(assembled.device)
        times.append(1000 * (time.perf_counter() - start))
        if times[-1] > budget_ms:
            break
    return min(times)
