"""What a probe found (`ProbeResult`), and how its facts are recorded in the verdict cache: its
verdict under the combination's key, its speed at a batch size under `speed_key`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from hpo.engine import AssembledModel
from hpo.verdicts import Kind, Verdict
from hpo.verify.probing._bounds import Errors, NumericBound
from hpo.verify.stored import VerdictStore, speed_key

__all__ = ["ProbeResult", "keep_probe", "speed_fact"]


@dataclass
class ProbeResult:
    verdict: Verdict
    loss_rel_err: float | None = None
    grad_rel_err: float | None = None
    # What rounding alone gives on this model under the trial's precision, and the bounds the
    # errors were judged against (`hpo.verify.probing._bounds`).
    loss_floor: float | None = None
    grad_floor: float | None = None
    loss_bound: float | None = None
    grad_bound: float | None = None
    slowdown: float | None = None
    reference_step_ms: float | None = None
    trial_step_ms: float | None = None  # the fastest of the timed steady steps
    trial_steps_ms: list[float] | None = None  # every timed step, after the untimed ones (`hpo.verify.timing._steady`)
    # trial_step_ms (and slowdown) are a lower bound: the step was stopped past the slow limit, and
    # proven slow (`hpo.verify.timing._step_deadline`).
    trial_step_stopped: bool = False
    peak_mem_mb: float | None = None  # the probe's own peak for the trial's model (see MemoryMeter)
    observed: dict = field(default_factory=dict)
    probe_s: float = 0.0
    reference_reused: bool = False  # the reference's compared step was read from an earlier probe's
    # How the verdict was proven: "contract" (a known upstream failure), "evidence" (a knob ran as
    # something else), "differential" (the reference passes where these knobs fail), "machine fact" (a
    # precision this CPU emulates, `hpo.verify.timing._emulated`). None when ok.
    blame: str | None = None
    # A timed probe's `slow` verdict at the trial's batch size, apart from `verdict`: compatibility
    # holds at every batch size, speed is judged per batch size (`hpo.verify.stored.speed_key`).
    slow: Verdict | None = None
    # Why a timed probe gave no `slow` verdict although its steps were over the limit: the
    # reference's own steps varied too much to judge (`hpo.verify.timing.SlowProof`).
    slow_not_judged: str | None = None
    # Why the compared step's errors were not judged: the reference ran other knobs than its own.
    numerics_not_judged: str | None = None
    # With `keep_model`, a passing probe's trial model, restarted at its initial weights: the
    # trial trains it instead of building its own. Never part of the record.
    model: AssembledModel | None = field(default=None, repr=False, compare=False)
    # With `keep_timed`, a passing timed probe's trial model as the timing left it (stepped, warm).
    # Never part of the record.
    timed_model: AssembledModel | None = field(default=None, repr=False, compare=False)

    def record_numerics(self, errors: Errors, bound: NumericBound) -> None:
        self.loss_rel_err, self.grad_rel_err = errors.loss, errors.grad
        self.loss_floor, self.grad_floor = bound.floor.loss, bound.floor.grad
        self.loss_bound, self.grad_bound = bound.bound.loss, bound.bound.grad

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    def record(self) -> dict:
        """The cache's record: the verdict as its readable string, with what it implicates."""
        record = asdict(replace(self, model=None, timed_model=None, slow=None))  # a model is no record: never copied
        del record["model"], record["timed_model"], record["slow"]
        record["verdict"], record["implicates"] = str(self.verdict), self.verdict.implicated_record()
        return record

    def speed_record(self, batch_size: int) -> dict | None:
        """The speed fact at `batch_size` a timed probe measured, for `hpo.verify.stored.speed_key`."""
        if self.trial_step_ms is None or not self.ok:
            return None
        verdict = self.slow or Verdict(Kind.OK)
        fact = speed_fact(verdict, self.slowdown, self.trial_step_ms, batch_size, self.trial_steps_ms)
        return {**fact, "trial_step_stopped": True} if self.trial_step_stopped else fact


def speed_fact(
    verdict: Verdict, slowdown: float | None, step_ms: float, batch_size: int, steps_ms: list[float] | None = None
) -> dict:
    """A speed fact; `steps_ms` are the timed steps `step_ms` is the fastest of, when known."""
    return {
        "verdict": str(verdict),
        "implicates": verdict.implicated_record(),
        "slowdown": slowdown,
        "trial_step_ms": step_ms,
        "trial_steps_ms": steps_ms,
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
