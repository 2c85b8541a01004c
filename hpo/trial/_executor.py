"""Run one trial config: verify its knobs (probe or cached verdict), train, and say what ran.

Used by the Optuna objective and by `hpo train`; it knows nothing about Optuna. A verdict is the
outcome only when the knobs are proven at fault (`hpo.verify.probing._probe`, `hpo.verify.timing._slow_proof`); any other
failure is raised as `TrialError`, with the trial's attrs and its traceback, and caches nothing.

A trial is a short sequence of named steps (`_verify_and_train`), each taking the one `TrialRun`
that carries what the trial was given and what each step leaves for the next.
"""

from __future__ import annotations

import dataclasses
import time

from hpo.config.trial import TrialConfig
from hpo.engine import AssembledModel, check_settings
from hpo.errors import KnobUnavailable, PrunedByPruner, TrialError, TrialRejected, error_verdict, short_traceback
from hpo.hardware import (
    capped_process,
    enforced_limit,
    free_memory,
    is_out_of_memory,
    limit_bytes,
    seed_everything,
    trial_runtime,
)
from hpo.records import RecordKey
from hpo.trial._memory_limit import budget_memory, oom_part
from hpo.trial._outcome import TrialOutcome, ended, known_verdict
from hpo.trial._phases import Phases
from hpo.trial._ranks import execute_ranks
from hpo.trial._run import TrialRun
from hpo.trial._slowdown import prove_too_slow, record_speed, slow_limit
from hpo.trial._speed_record import objective_values, speed_attrs
from hpo.trial._trainer import EvalCallback, TooSlow, TrainResult, train
from hpo.verdicts import Kind, Verdict
from hpo.verify.probing import KeptReferences, ProbeResult, keep_probe, run_probe
from hpo.verify.stored import VerdictStore
from hpo.verify.timing import SlowLimit
from hpo.workloads.catalog import create_workload

__all__ = ["TrialOutcome", "execute"]


def execute(
    config: TrialConfig,
    verdicts: VerdictStore,
    on_eval: EvalCallback | None = None,
    phases: Phases | None = None,
    references: KeptReferences | None = None,
) -> TrialOutcome:
    """Verify the knobs (a cached verdict, or the probe), train, and say what ran. A knob verdict,
    divergence, OOM or pruning is the outcome; any other failure raises TrialError.
    `phases` collects where the time went; the caller records it (`phases_s`) with its own phases.
    `references` keeps the probe's reference step for the worker's later probes of the same model."""
    run = TrialRun(config, verdicts, on_eval, phases if phases is not None else Phases(), references)
    if config.parallel is not None:
        return execute_ranks(config, run.attrs)
    cached = known_verdict(verdicts, run.key, config.training.batch_size)
    if cached is not None:
        # Nothing ran here: what the cached verdict's own trial observed is not this trial's.
        cached_attrs = {RecordKey.PROBE_S: 0.0, RecordKey.PROBE_CACHED: True, RecordKey.VERDICT_FROM_CACHE: True}
        run.attrs.update(cached_attrs | {RecordKey.KNOBS_OBSERVED: {}})
        return ended(cached, run.attrs)
    # On a CPU the limit is also a hard cap on this process from the probe on, not only in training:
    # the peak fits and the reference's timing step only at sizes predicted to fit, but a prediction
    # can fall short, and the probe's compared step (a compiled model's at the whole batch) and a
    # Lightning probe's timed steps are predicted by nothing (`hpo.hardware._memory_cap`).
    with trial_runtime(run.device) as runtime, capped_process(run.device, _study_limit(run)):
        run.attrs[RecordKey.RUNTIME] = runtime
        return _outcome(run)


def _study_limit(run: TrialRun) -> int | None:
    """The limit the study set, in bytes; None when it set none (the CUDA default is the device's own)."""
    limit_gb = run.config.memory_limit_gb
    return None if limit_gb is None else limit_bytes(run.device, limit_gb)


def _outcome(run: TrialRun) -> TrialOutcome:
    """The trial's outcome, with each way it can end short mapped to its verdict."""
    try:
        return _verify_and_train(run)
    except KnobUnavailable as exc:  # a knob found unusable while training (a Lightning module's optimizer)
        return ended(exc.verdict, run.attrs)
    except TrialRejected as exc:
        run.attrs[RecordKey.KNOBS_OBSERVED] = exc.observed or run.attrs.get(RecordKey.KNOBS_OBSERVED, {})
        return ended(exc.verdict, run.attrs)
    except PrunedByPruner as exc:
        return ended(Verdict(Kind.PRUNED, exc.where), run.attrs)
    except Exception as exc:
        if is_out_of_memory(exc):
            # The batch size did not fit with these knobs: the sampler avoids it (and larger) with them.
            return ended(_oom_verdict(run, exc), run.attrs)
        # Not proven to be the knobs' (it may be the workload, the data or the device): an
        # error, with its traceback, and nothing cached.
        run.attrs[RecordKey.ERROR_TRACEBACK] = short_traceback(exc)
        raise TrialError(error_verdict(exc), run.attrs) from exc
    finally:
        free_memory(run.device)


def _oom_verdict(run: TrialRun, exc: BaseException) -> Verdict:
    first_line = (str(exc).splitlines() or [""])[0]
    # torch's CPU allocator's message starts with "[enforce fail at alloc_cpu.cpp:N] err == 0. ".
    detail = first_line.partition(" err == 0. ")[2] or first_line
    return Verdict.make(Kind.OOM, f"{type(exc).__name__}: {detail[:200]}".rstrip(": "), oom_part(run.config))


def _verify_and_train(run: TrialRun) -> TrialOutcome:
    start = time.perf_counter()
    _load_workload(run)
    rejection = _verify(run)
    if rejection is not None:
        return rejection
    rejection = budget_memory(run)
    if rejection is not None:
        return rejection
    # A limit the study set is enforced while training (on a CPU by hpo's meter, under the cap).
    with enforced_limit(run.device, _study_limit(run)):
        if run.workload.trainer == "lightning":
            _train_with_lightning(run)
        else:
            _train_with_hpo(run)
    _record_training(run)
    run.attrs[RecordKey.TRIAL_S] = time.perf_counter() - start
    return TrialOutcome(verdict=Verdict(Kind.OK), values=objective_values(run.config, run.result, run.attrs), attrs=run.attrs)


def _load_workload(run: TrialRun) -> None:
    with run.phases("data"):
        run.workload = create_workload(run.config.workload, run.config.workload_options)
        run.workload.bind_training(dataclasses.asdict(run.config.training))
    run.attrs[RecordKey.TRAINER] = run.workload.trainer
    check_settings(run.workload, run.config.loader, run.device)  # before the probe spends anything on them


def _verify(run: TrialRun) -> TrialOutcome | None:
    """The probe, unless the knobs' verdict is cached; the outcome when it rules the knobs out. A
    passing probe hands its model on to training."""
    if run.verdicts.get(run.key) is not None:
        run.attrs.update({RecordKey.PROBE_S: 0.0, RecordKey.PROBE_CACHED: True})
        return None
    own_loop = run.workload.trainer == "hpo"  # hpo's loop checks speed in training; Lightning's probe times it
    with run.phases("probe"):
        probe = run_probe(
            run.workload, run.config, run.device, run.verdicts, own_loop, timed=not own_loop, references=run.references
        )
    keep_probe(run.verdicts, run.key, run.facts, probe, run.config.training.batch_size)
    run.attrs.update(_probe_attrs(probe))
    if probe.slow_not_judged is not None:  # timed by a Lightning probe, or no reference fits the batch: it trains, unjudged
        run.attrs[RecordKey.SLOW_NOT_JUDGED] = probe.slow_not_judged
    verdict = probe.slow if probe.ok and probe.slow is not None else probe.verdict
    if not verdict.ok:
        run.attrs[RecordKey.KNOBS_OBSERVED] = probe.observed
        return ended(verdict, run.attrs)
    run.model, probe.model = probe.model, None
    return None


def _train_with_lightning(run: TrialRun) -> None:
    from hpo.trial._lightning_loop import lightning_precision, train_lightning  # imports Lightning

    config, run.model = run.config, None  # Lightning builds its own module
    seed_everything(config.seed)
    run.attrs[RecordKey.LIGHTNING_PRECISION] = lightning_precision(config.knobs.precision, run.device.type)
    run.result = train_lightning(run.workload, config, run.device, run.on_eval)


def _train_with_hpo(run: TrialRun) -> None:
    run.slow_limit = slow_limit(run)
    try:
        run.result = _train_from_start(run, run.slow_limit if run.config.skip_slow else None)
    except TooSlow as exc:
        run.result = _retrained_unless_proven_slow(run, exc)
    finally:
        run.model = None  # before the next trial
    record_speed(run)
    run.phases.add("train", run.result.train_s)
    run.phases.add("evidence", run.result.evidence_s)
    run.phases.add("eval", run.result.eval_s)


def _retrained_unless_proven_slow(run: TrialRun, exc: TooSlow) -> TrainResult:
    """After a slow check failed: the proof's `slow` verdict raised, else the trial trained again
    from the start, without the check, so that its result is its knobs' and not a verdict that
    nothing proved (timed again beside the reference, nothing was slow: the first steps met a busy
    machine; or the reference itself was too noisy to judge: neither says anything of the knobs)."""
    run.model = None  # before the proof times other knobs
    proof = prove_too_slow(run, exc)
    if proof.verdict is not None:
        raise TooSlow(proof.verdict, exc.observed, exc.step_ms) from None
    if proof.not_judged is not None:
        run.attrs[RecordKey.SLOW_NOT_JUDGED] = proof.not_judged
    else:
        run.attrs[RecordKey.SLOW_NOT_CONFIRMED] = exc.verdict.detail
    return _train_from_start(run, None)


def _train_from_start(run: TrialRun, slow: SlowLimit | None) -> TrainResult:
    if run.model is None:  # the verdict was cached (no probe built the model), or a slow check ended it
        with run.phases("build"):
            seed_everything(run.config.seed)  # the weights the probe's reference would start from
            run.model = AssembledModel(run.workload, run.config.knobs, run.config.training, run.device)
    # Seeded again, so training draws the same dropout and batches whether the model was built
    # just now or handed on by the probe.
    seed_everything(run.config.seed)
    return train(run.model, run.config, run.on_eval, slow)


def _record_training(run: TrialRun) -> None:
    result = run.result
    run.attrs.update(
        {
            RecordKey.KNOBS_OBSERVED: result.knobs_observed,
            RecordKey.TRAIN_SAMPLES_PER_S: result.train_samples_per_s,
            RecordKey.STEADY_SAMPLES_PER_S: result.steady_samples_per_s,
            RecordKey.STEP_TIME_MS: result.step_time_ms,
            RecordKey.PEAK_MEM_MB: result.peak_mem_mb,
            RecordKey.N_PARAMS: result.n_params,
            RecordKey.METRICS: result.metrics,
        }
    )
    if result.loader_observed is not None:
        run.attrs[RecordKey.LOADER_OBSERVED] = result.loader_observed
        run.attrs[RecordKey.DATA_WAIT_SHARE] = result.data_wait_share
    with run.phases("flops"):
        run.attrs.update(speed_attrs(run.workload, run.config, run.device, result, run.verdicts))


def _probe_attrs(probe: ProbeResult) -> dict:
    return {
        RecordKey.PROBE_S: probe.probe_s,
        RecordKey.PROBE_CACHED: False,
        RecordKey.PROBE_REFERENCE_REUSED: probe.reference_reused,
        RecordKey.PROBE_BLAME: probe.blame,
        RecordKey.SLOWDOWN: probe.slowdown,
        RecordKey.PROBE_LOSS_REL_ERR: probe.loss_rel_err,
        RecordKey.PROBE_GRAD_REL_ERR: probe.grad_rel_err,
        RecordKey.PROBE_LOSS_FLOOR: probe.loss_floor,
        RecordKey.PROBE_GRAD_FLOOR: probe.grad_floor,
        RecordKey.PROBE_LOSS_BOUND: probe.loss_bound,
        RecordKey.PROBE_GRAD_BOUND: probe.grad_bound,
        RecordKey.PROBE_NUMERICS_NOT_JUDGED: probe.numerics_not_judged,
    }
