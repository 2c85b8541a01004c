"""A trial with `systems.parallel`: its ranks run it (`hpo.parallel`), and this process, rank 0's
launcher, writes the one record. The probe runs on every rank, not here (`hpo.parallel.rank_probe`,
a Lightning workload's ranks as hpo's loop's):
its seconds, rank 0's compared step and what it did not cover under ranks are recorded, and a
failing rank's traceback with the verdict that names it."""

from __future__ import annotations

import math

import torch

from hpo.config.trial import TrialConfig
from hpo.errors import UserInputError
from hpo.parallel import RanksOutcome, run_ranks, train_on_rank
from hpo.parallel.group import rank_device
from hpo.parallel.rank_probe import PROBE_UNDER_RANKS
from hpo.records import RecordKey
from hpo.trial._lightning_rank_train import PROBE_UNDER_LIGHTNING_RANKS, train_lightning_on_rank
from hpo.trial._memory_limit import oom_part
from hpo.trial._outcome import TrialOutcome, ended
from hpo.trial._ranks_memory import check_auto_batch, ranks_memory_attrs, trained_config
from hpo.trial._ranks_speed import ranks_speed_attrs
from hpo.trial._speed_record import objective_values
from hpo.trial._trainer import TrainResult
from hpo.verdicts import Kind, Verdict
from hpo.workloads.catalog import trainer_of

__all__ = ["check_ranks_can_run", "execute_ranks"]


def check_ranks_can_run(config: TrialConfig) -> None:
    """Refuse, in one line, ranks this machine cannot place (the file's own checks ran when it was
    read, `hpo.config.parallel_checks`; the GPUs are counted here, with torch)."""
    processes = config.parallel.processes
    device = rank_device(config.device, 0)
    check_auto_batch(config, trainer_of(config.workload), device)
    if device.type == "cuda" and torch.cuda.device_count() < processes:
        raise UserInputError(
            f"systems.parallel.processes: {processes} ranks need as many GPUs, this process sees "
            f"{torch.cuda.device_count()}; lower processes or make more GPUs visible"
        )
    if config.training.batch_size % processes:
        raise UserInputError(
            f"params.batch_size is the global batch and must divide over systems.parallel.processes "
            f"{processes}, got {config.training.batch_size}; use a multiple of {processes}"
        )


def execute_ranks(config: TrialConfig, attrs: dict, deadline_s: float | None = None) -> TrialOutcome:
    """Run the trial as its ranks, adding to `attrs` (what was asked: config, knobs, device); a
    failed rank's verdict (crashed, timeout, mismatch) is the outcome."""
    check_ranks_can_run(config)
    lightning = trainer_of(config.workload) == "lightning"
    outcome = run_ranks(config, deadline_s=deadline_s, train=train_lightning_on_rank if lightning else train_on_rank)
    attrs |= _ranks_attrs(outcome, lightning) | _probe_attrs(outcome) | {RecordKey.TRAINER: "lightning" if lightning else "hpo"}
    memory, per_rank = ranks_memory_attrs(config, outcome)
    attrs |= memory
    attrs[RecordKey.PARALLEL] |= per_rank
    if not outcome.verdict.ok:
        return ended(_implicating(config, outcome.verdict), attrs)
    config = trained_config(config, outcome)
    result = _train_result(config, outcome.ranks[0], attrs[RecordKey.PARALLEL]["peak_memory_mb_max"])
    attrs |= _trained_attrs(config, result)
    return TrialOutcome(Verdict(Kind.OK), objective_values(config, result, attrs), attrs)


def _probe_attrs(outcome: RanksOutcome) -> dict:
    """The probe's record: its seconds (the slowest rank's, which every rank waited for), rank 0's
    blame and compared step; when the ranks agreed on a failure, what rank 0 kept of it (the failing
    rank's traceback, rank 0's observed knobs, the probe's seconds)."""
    if not outcome.ranks:
        return _agreed_attrs(outcome.agreed or {})
    probe = outcome.ranks[0]["probe"]
    return {
        RecordKey.PROBE_S: max(probe["probe_s_per_rank"]),
        RecordKey.PROBE_CACHED: False,
        RecordKey.PROBE_BLAME: probe["blame"],
        RecordKey.PROBE_LOSS_REL_ERR: probe["loss_rel_err"],
        RecordKey.PROBE_GRAD_REL_ERR: probe["grad_rel_err"],
        RecordKey.PROBE_LOSS_BOUND: probe["loss_bound"],
        RecordKey.PROBE_GRAD_BOUND: probe["grad_bound"],
        RecordKey.PROBE_NUMERICS_NOT_JUDGED: probe["numerics_not_judged"],
    }


def _agreed_attrs(agreed: dict) -> dict:
    """What rank 0 kept of a failure the ranks agreed on: the failing rank's traceback, rank 0's
    observed knobs, the probe's seconds, where it has them."""
    kept = {
        RecordKey.ERROR_TRACEBACK: agreed.get("traceback"),
        RecordKey.KNOBS_OBSERVED: agreed.get("knobs_observed"),
        RecordKey.PROBE_S: agreed.get("probe_s"),
    }
    return {key: value for key, value in kept.items() if value is not None}


def _trained_attrs(config: TrialConfig, result: TrainResult) -> dict:
    return {
        RecordKey.METRICS: result.metrics,
        RecordKey.TRAIN_SAMPLES_PER_S: _known(result.train_samples_per_s),
        RecordKey.STEADY_SAMPLES_PER_S: _known(result.train_samples_per_s),
        **ranks_speed_attrs(config, _known(result.train_samples_per_s)),
        RecordKey.STEP_TIME_MS: _known(result.step_time_ms),
        RecordKey.PEAK_MEM_MB: result.peak_mem_mb,
        RecordKey.N_PARAMS: result.n_params,
        RecordKey.STEPS_RUN: result.steps,
    }


def _implicating(config: TrialConfig, verdict: Verdict) -> Verdict:
    """A rank out of memory implicates what a one-process trial's would: the knobs at that batch,
    so the sampler avoids the combination there and above (and the usual rules do not retry it)."""
    if verdict.kind is Kind.OOM and not verdict.implicates:
        return Verdict.make(Kind.OOM, verdict.detail, oom_part(config))
    return verdict


def _ranks_attrs(outcome: RanksOutcome, lightning: bool) -> dict:
    """The ranks' record; with their results (recorded also when an effect contradicts the request:
    the evidence of it), rank 0's observed knobs and effects, the largest collective share and, on
    Lightning's Trainer, what it ran: its strategy, world size and precision."""
    probe = PROBE_UNDER_LIGHTNING_RANKS if lightning else PROBE_UNDER_RANKS
    attrs = {RecordKey.PARALLEL: {**outcome.record(), "last_steps": outcome.last_steps, "probe": probe}}
    if not outcome.ranks:
        return attrs
    first = outcome.ranks[0]
    attrs[RecordKey.PARALLEL_OBSERVED] = first["parallel_observed"]
    attrs[RecordKey.KNOBS_OBSERVED] = first["knobs_observed"]
    attrs[RecordKey.COLLECTIVE_SHARE] = _largest(r["collective_share"] for r in outcome.ranks)
    if lightning:
        attrs[RecordKey.PARALLEL]["lightning"] = first["lightning"]
        attrs[RecordKey.LIGHTNING_PRECISION] = first["lightning"]["precision"]
    return attrs


def _largest(shares) -> float | None:
    known = [share for share in shares if share is not None]
    return max(known) if known else None


def _known(value: float) -> float | None:
    return None if math.isnan(value) else value


def _train_result(config: TrialConfig, first: dict, peak_mb: float) -> TrainResult:
    """Rank 0's result as a one-process trial's; with no steady step timed, the speeds are
    unknown (NaN), and a speed objective takes its worst value."""
    samples_per_s = first["samples_per_s"] or math.nan
    return TrainResult(
        metrics=first["metrics"],
        knobs_observed=first["knobs_observed"],
        step_time_ms=1000 * first["global_batch"] / samples_per_s,
        train_samples_per_s=samples_per_s,
        peak_mem_mb=peak_mb,
        n_params=first["n_params"],
        steps=config.training.max_steps,
    )
