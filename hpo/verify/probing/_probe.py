"""Pre-trial compatibility probe: one real forward and backward with the trial's knobs, checked
against an fp32/eager/for-loop reference on the same samples and weights.

The verdict is `ok` or a knob verdict (`incompatible: <why>`), given only when the knobs are
proven at fault: a known upstream refusal (`hpo.verify.fault._known_failures`), evidence that a knob ran
as something else, or a differential run in which the reference passes and the knobs fail, tried
value by value so that only the value or pair at fault is implicated (`hpo.verify.fault._differential`). Anything
else is raised: an error, never a verdict. A timed probe also judges `slow` at the trial's batch.
Nothing is downgraded: the probe only decides whether the trial's own knobs may train.

Cost, since a trial pays it before every new knob combination:
- the compared step runs on `PROBE_SAMPLES` samples, not the trial's batch: numerics and kernel
  choice need real data, not much of it. A model with batch-statistics layers (BatchNorm in train
  mode) gets `BATCH_STATISTICS_SAMPLES`: over 4 samples its normalisation divides by a spread that
  amplifies rounding (docs/failures.md). A compiled model, specialised to its input shapes, is
  compared on the batch it will train on;
- a low precision's errors are judged against this model's own rounding floor, measured once per
  model and precision on the reference (`hpo.verify.probing._bounds`);
- the trial's model is handed on to train (`keep_model`), so a trial builds one model, not two;
- the reference's compared step (its loss, gradients and initial weights) depends on the model,
  not on the knobs: a worker's later probes of the same model read it from `references`
  (`hpo.verify.probing._kept_reference`) instead of building the reference and running it again;
- a trial's probe times nothing of the trial: its first steady training steps decide `slow`
  (`hpo.verify.timing._slow_limit`). Only the reference's step time is measured (`hpo.verify.timing._reference_time`), once
  per model, batch size and device, and kept in the verdict store (the study's). `hpo probe` and
  the Lightning path time the trial too (`timed`), in steady steps (`hpo.verify.timing._steady`);
- the compared steps run in train mode with dropout off (`hpo.verify.probing._dropout_off`), so a compiled
  trial's graph is the train-mode graph it trains with, and its update moves no weight
  (`hpo.verify.probing._compared_step`): the trial trains from where the probe left it, nothing restored;
- the reference's initial weights are its own parameters, not a copy: it is never updated before
  the trial's compared step has loaded them.
"""

from __future__ import annotations

import contextlib
import gc
import time

import torch

from hpo.config.trial import TrialConfig
from hpo.engine import AssembledModel, counting_flops
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import observed_knobs
from hpo.hardware import hand_back_freed, resident_bytes, seed_everything
from hpo.verify.fault import REFERENCE_KNOBS, ran_other_than_reference
from hpo.verify.probing._compared_step import ComparedSteps, loss_and_grads
from hpo.verify.probing._kept_reference import ComparedReference, KeptReferences, compared_key
from hpo.verify.probing._result import ProbeResult, keep_probe
from hpo.verify.probing._samples import BATCH_STATISTICS_SAMPLES, PROBE_SAMPLES, compared_batch, compared_samples
from hpo.verify.probing._speed import time_trial, timed_reference
from hpo.verify.stored import MachineFacts, MemoryVerdicts, VerdictStore, flops_key, reference_key
from hpo.verify.timing import DEFAULT_POLICY, TimingPolicy, emulated_slow
from hpo.workloads.base import Batch, Workload

# keep_probe: re-exported for `hpo probe`, which runs and keeps probes as the executor does; the
# compared samples (`hpo.verify.probing._samples`) for the tests that read them here.
__all__ = ["BATCH_STATISTICS_SAMPLES", "PROBE_SAMPLES", "compared_samples", "keep_probe", "run_probe"]


def run_probe(
    workload: Workload,
    config: TrialConfig,
    device: torch.device,
    store: VerdictStore | None = None,
    keep_model: bool = False,
    timed: bool = True,
    references: KeptReferences | None = None,
    policy: TimingPolicy = DEFAULT_POLICY,
    keep_timed: bool = False,
    machine: MachineFacts | None = None,
    time_reference: bool = True,
) -> ProbeResult:
    """Probe the trial's knobs. `store` keeps the reference's step time between probes;
    `keep_model` hands a passing probe's trial model on for training (see ProbeResult.model);
    `timed` also times the trial's steps for its slowdown and `slow` verdict (`hpo probe`, which
    trains nothing); untimed, only the reference's step time is measured, if no store has it, and
    with `time_reference` off not even that (a trial of ranks, whose speed nothing judges).
    `references` keeps the reference's compared step for the next probe of the same model.
    `policy` times the trial's steps (probe_first's sweep takes one, `ONE_STEP`); a `slow` verdict is
    only ever given by the steady proof (`hpo.verify.timing._slow_proof`), whatever `policy` is. `keep_timed`
    hands a passing timed probe's trial model on as it is, stepped (`ProbeResult.timed_model`: for
    probe_first's race, which times it again, never for training). A precision this CPU only
    emulates is `slow` from `machine`'s stored fact (`hpo.verify.timing._emulated`), before anything is built,
    where the study judges speed; `machine` defaults to this machine's facts folder.

    Only the trial's own knobs can earn a verdict. The data fetch and the reference's step run
    outside any verdict: their exceptions propagate (an error, never the knobs' fault), as do out
    of memory (the trial's size) and a failure that does not repeat (`hpo.verify.probing._compared_step.NotReproduced`)."""
    _check_timing(keep_model, timed, time_reference)
    start = time.perf_counter()
    emulated = emulated_slow(config.knobs.precision, device, machine) if config.skip_slow else None
    if emulated is not None:  # proven once for this machine, whatever the model (`hpo.verify.timing._emulated`)
        return ProbeResult(verdict=emulated, blame="machine fact", probe_s=time.perf_counter() - start)
    probe = _Probe(workload, config, device, store if store is not None else MemoryVerdicts(), references, time_reference)
    result = probe.run(timed, keep_timed, policy)
    if keep_model and result.ok and probe.trial is not None:
        result.model = probe.hand_on_trial()
    result.reference_reused = probe.reused
    result.probe_s = time.perf_counter() - start
    return result


def _check_timing(keep_model: bool, timed: bool, time_reference: bool) -> None:
    if keep_model and timed:
        raise ValueError("run_probe: keep_model needs timed=False (timed steps update the model it would hand on), got both")
    if timed and not time_reference:
        raise ValueError(
            "run_probe: timed needs time_reference (the trial's steps are judged against it), got time_reference=False"
        )


class _Probe:
    """One probe's models: the reference (built here, or its compared step kept from an earlier probe
    of the model) and the trial's. Its attributes are the only names that hold them, so that
    dropping them frees the models."""

    def __init__(
        self, workload: Workload, config: TrialConfig, device, store: VerdictStore, references, time_reference: bool
    ) -> None:
        self.workload, self.config, self.device, self.store, self.references = workload, config, device, store, references
        self.time_reference = time_reference
        self.reference_ms = (store.get(reference_key(config, device)) or {}).get("step_ms")
        self.key = compared_key(workload, config, device)
        # A reference still to be timed runs its compared step anyway: it warms the reference up, and
        # what the step added to the resident set sizes the memory its timing touches beforehand.
        self.kept = references.get(self.key, device) if references is not None and self.reference_ms is not None else None
        self.reused = self.kept is not None
        self.reference, self.trial, self.steps, self.compared_growth = None, None, None, 0

    def run(self, timed: bool, keep_timed: bool, policy: TimingPolicy) -> ProbeResult:
        """The trial's compared step against the reference's; its failure blamed, or its speed timed."""
        self._compare_reference()
        failure = self._attempt()
        result = self.steps.result
        stepped = None  # a model of the trial's knobs that ran full-batch steps here (timed)
        if failure is not None:
            result.peak_mem_mb = self.trial.memory.peak_mb if self.trial is not None else None
            self.trial = self.reference = None  # the differential run builds models of its own: not beside these
            gc.collect()
            result.verdict, result.blame = self.steps.blame(self.config.knobs, failure)
        elif self.time_reference:
            stepped = self._time(result, timed, keep_timed, policy)
        if self.trial is not None:
            result.peak_mem_mb = self.trial.memory.peak_mb
        if stepped is not None and result.ok and result.slow is None:
            result.timed_model = stepped
        return result

    def _compare_reference(self) -> None:
        """The trial's batch and the compared samples; the reference's compared step, run on a
        newly built reference unless an earlier probe of the model kept it."""
        workload, config = self.workload, self.config
        self.batch = next(workload.train_batches(config.training.batch_size, config.seed))
        if self.kept is not None:
            self.compared = compared_batch(workload, config, self.batch, self.kept.samples)
            return
        seed_everything(config.seed)
        self.reference = AssembledModel(workload, REFERENCE_KNOBS, config.training, self.device)
        self.compared = compared_batch(workload, config, self.batch, compared_samples(config, self.reference.model))
        self.kept, self.compared_growth = _reference_step(self.reference, config, self.device, self.compared, self.store)
        if self.references is not None:
            self.references.put(self.key, self.kept)

    def _attempt(self):
        """The trial's compared step, with evidence of what ran; its failure, or None."""
        floors_known = set(self.kept.floors)
        self.steps = ComparedSteps(self.workload, self.config, self.device, self.kept, self.compared, self.reference)
        self.trial, failure = self.steps.attempt(self.config.knobs, evidence=True)
        if self.references is not None and set(self.kept.floors) != floors_known:
            self.references.put(self.key, self.kept)  # the floors this probe measured, for the next probe of the model
        return failure

    def _time(self, result: ProbeResult, timed: bool, keep_timed: bool, policy: TimingPolicy):
        """The reference's step time (timed here if no store has it) and, `timed`, the trial's steps
        against it. Returns the model that ran full-batch steps here when `keep_timed` hands it on."""
        timed_reference_here = self.reference_ms is None
        if self.reference_ms is None:
            samples = self.workload.samples_in(self.compared)
            growth = self.compared_growth
            self.reference_ms = timed_reference(result, self.reference, self.batch, growth, samples, self.config, self.store)
        result.reference_step_ms = reference_ms = self.reference_ms
        if not timed or reference_ms is None:
            return None
        if self.config.knobs == REFERENCE_KNOBS:
            # The reference itself: timing it against itself would only measure noise.
            reference_steps = (self.store.get(reference_key(self.config, self.device)) or {}).get("timed_steps_ms")
            result.slowdown, result.trial_step_ms, result.trial_steps_ms = 1.0, reference_ms, reference_steps or [reference_ms]
            # No other name may hold the reference unless it is handed on: `keep_model` frees it.
            return self.reference if keep_timed and timed_reference_here else None
        time_trial(result, self.trial, self.steps, self.batch, self.config, reference_ms, policy)
        return self.trial if keep_timed else None

    def hand_on_trial(self) -> AssembledModel:
        """The passing trial's model, to train. Before training starts: the trial's peak memory is its
        own. Nothing of the reference refers to itself (`AssembledModel`'s scheduler holds no bound
        method), so dropping the last names frees it here, without a gc.collect."""
        trial = self.trial
        trial.restart()
        _restore_buffers(trial.model, self.kept.initial)
        self.reference = self.kept = self.steps = None
        hand_back_freed(self.device)
        return trial


def _restore_buffers(model: torch.nn.Module, initial: dict[str, torch.Tensor]) -> None:
    """Buffers back at their initial values (the compared step in train mode updated batch norm's
    running statistics): a probed model then trains as a newly built one would."""
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name in initial:
                buffer.copy_(initial[name])


def _reference_step(
    reference: AssembledModel, config: TrialConfig, device: torch.device, compared: Batch, store: VerdictStore
) -> tuple[ComparedReference, int]:
    """Run the reference's compared step, without an update (the reference is compared, not
    trained). Returns its compared step and what that step added to the resident set. The step
    also counts the model's FLOPs per sample into `store`, when the study has no count yet and the
    step is not a compiled trial's whole batch: the reference is the plain eager fp32 model the count needs
    (`hpo.engine._flops`), so the trial's speed record need not build another. What the step ran is
    observed, as a trial's is: a reference that ran other knobs judges no comparison."""
    # Its own parameters, not a copy: the compared step does not update them, and the reference is
    # timed (updating them) only after the trial's compared step has loaded them. Buffers are
    # copied (they are small): a train-mode step updates batch norm's running statistics.
    parameters = {id(p) for p in reference.model.parameters()}
    initial = {k: v if id(v) in parameters else v.clone() for k, v in reference.model.state_dict(keep_vars=True).items()}
    initial = {k: v.detach() for k, v in initial.items()}
    samples = reference.workload.samples_in(compared)
    # Not a compiled trial's whole batch: counting it would cost more than the speed record's own count.
    count = not config.knobs.compile and store.get(flops_key(config, device)) is None
    with capture_step(reference) as seen:  # started outside the growth measured: the profiler's own memory is not the step's
        resident = resident_bytes()
        with counting_flops() if count else contextlib.nullcontext() as flops:
            loss, grads = loss_and_grads(reference, reference.move(compared))
        growth = resident_bytes() - resident
    if count:
        store.put(flops_key(config, device), {"model_flops_per_sample": flops.total / samples})
    return ComparedReference(loss, grads, initial, samples, ran_other=ran_other_than_reference(observed_knobs(seen))), growth
