"""Pre-trial compatibility probe: one real batch forward and backward with the trial's knobs, checked
against an fp32/eager/for-loop reference on the same batch and weights, then a few timed steps.

The verdict is `ok`, `incompatible: <why>` or `slow: <ratio>x ...`. Nothing is downgraded: the probe
only decides whether the trial's own knobs may train.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from hpo.config import Knobs, TrialConfig
from hpo.errors import KnobUnavailable, TrialRejected
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import mismatches, observed_knobs
from hpo.execution.assembly import AssembledModel
from hpo.hardware.runtime import seed_everything, synchronize
from hpo.verify.classify import classify_failure
from hpo.verify.tolerances import TOLERANCES
from hpo.workloads.base import Batch, Workload

REFERENCE_KNOBS = Knobs(precision="fp32", attention="eager", optimizer="forloop")
TIMED_STEPS = 2


@dataclass
class ProbeResult:
    verdict: str
    loss_rel_err: float | None = None
    grad_rel_err: float | None = None
    slowdown: float | None = None
    reference_step_ms: float | None = None
    trial_step_ms: float | None = None
    observed: dict = field(default_factory=dict)
    probe_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def record(self) -> dict:
        return asdict(self)


def run_probe(workload: Workload, config: TrialConfig, device: torch.device) -> ProbeResult:
    start = time.perf_counter()
    try:
        result = _probe(workload, config, device)
    except (KnobUnavailable, TrialRejected) as exc:
        result = ProbeResult(verdict=str(exc))
    except (torch.OutOfMemoryError, MemoryError):
        raise  # out of memory is about this trial's size, not about the knobs: the trial records it
    except Exception as exc:  # noqa: BLE001 - any failure of the knobs is the verdict itself
        result = ProbeResult(verdict=classify_failure(exc, config.knobs))
    result.probe_s = time.perf_counter() - start
    return result


def _probe(workload: Workload, config: TrialConfig, device: torch.device) -> ProbeResult:
    batch = next(workload.train_batches(config.training.batch_size, config.seed))
    seed_everything(config.seed)
    reference = AssembledModel(workload, REFERENCE_KNOBS, config.training, device)
    ref_loss, ref_grads = _loss_and_grads(reference, reference.move(batch))
    trial = AssembledModel(workload, config.knobs, config.training, device)
    trial.model.load_state_dict(reference.model.state_dict())
    with capture_step(trial) as evidence:
        loss, grads = _loss_and_grads(trial, trial.move(batch))
    result = _compare(config.knobs.precision, loss, grads, ref_loss, ref_grads)
    result.observed = observed_knobs(evidence)
    problems = [p for p in mismatches(config.knobs, result.observed) if not p.startswith("optimizer")]
    if result.ok and problems:
        result.verdict = "incompatible: ran other than asked: " + "; ".join(problems)
    if result.ok:
        _time_steps(result, reference, trial, batch, config)
    return result


def _loss_and_grads(assembled: AssembledModel, batch: Batch) -> tuple[float, list[torch.Tensor]]:
    # Dropout off: the comparison must see the same function. The model stays in eval mode for the
    # timed steps too, so a compiled model is not recompiled for train mode mid-measurement.
    assembled.model.eval()
    loss = assembled.forward_backward(batch)
    scale = assembled.scaler.get_scale() if assembled.scaler else 1.0
    grads = [
        (p.grad.float() / scale) if p.grad is not None else torch.zeros_like(p, dtype=torch.float32)
        for p in assembled.model.parameters()
    ]
    assembled.optimizer.zero_grad(set_to_none=True)
    return loss.float().item(), grads


def _compare(precision: str, loss: float, grads, ref_loss: float, ref_grads) -> ProbeResult:
    if not torch.isfinite(torch.tensor(loss)):
        return ProbeResult(verdict=f"incompatible: non-finite loss {loss} under {precision}")
    if not all(torch.isfinite(g).all() for g in grads):
        return ProbeResult(verdict=f"incompatible: non-finite gradients under {precision} (overflow)")
    loss_err = abs(loss - ref_loss) / max(abs(ref_loss), 1e-12)
    diff = torch.sqrt(sum(((g - r) ** 2).sum() for g, r in zip(grads, ref_grads)))
    norm = torch.sqrt(sum((r**2).sum() for r in ref_grads))
    grad_err = (diff / norm.clamp_min(1e-12)).item()
    tol = TOLERANCES[precision]
    result = ProbeResult(verdict="ok", loss_rel_err=loss_err, grad_rel_err=grad_err)
    if loss_err > tol.loss:
        result.verdict = f"incompatible: loss differs from fp32/eager by {loss_err:.3g} (tolerance {tol.loss} for {precision})"
    elif grad_err > tol.grad:
        result.verdict = f"incompatible: gradients differ from fp32/eager by {grad_err:.3g} (tolerance {tol.grad} for {precision})"
    return result


def _time_steps(result: ProbeResult, reference: AssembledModel, trial: AssembledModel, batch: Batch, config) -> None:
    if config.knobs == REFERENCE_KNOBS:
        result.slowdown = 1.0  # the reference itself: timing it against itself would only measure noise
        return
    ref_ms = _fastest_step_ms(reference, batch, TIMED_STEPS, budget_ms=None)
    budget = ref_ms * config.slow_ratio
    trial_ms = _fastest_step_ms(trial, batch, TIMED_STEPS, budget_ms=budget)
    trial.check_scaler(step=0)
    result.reference_step_ms, result.trial_step_ms = ref_ms, trial_ms
    result.slowdown = trial_ms / ref_ms
    if config.skip_slow and result.slowdown > config.slow_ratio:
        result.verdict = (
            f"slow: {result.slowdown:.1f}x the fp32/eager step time on this device "
            f"({trial_ms:.0f} ms vs {ref_ms:.0f} ms; limit {config.slow_ratio}x)"
        )


def _fastest_step_ms(assembled: AssembledModel, batch: Batch, steps: int, budget_ms: float | None) -> float:
    """Fastest of a few steps (noise only ever adds time), after one untimed step that creates the
    optimizer state; stops early once a step exceeds `budget_ms`, since one warm step that slow
    is proof enough."""
    moved = assembled.move(batch)
    assembled.forward_backward(moved)
    assembled.optimizer_step()
    times = []
    for _ in range(steps):
        synchronize(assembled.device)
        start = time.perf_counter()
        assembled.forward_backward(moved)
        assembled.optimizer_step()
        synchronize(assembled.device)
        times.append(1000 * (time.perf_counter() - start))
        if budget_ms is not None and times[-1] > budget_ms:
            break
    return min(times)
