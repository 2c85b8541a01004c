"""One rank's training: the probe on every rank first (`hpo.parallel.rank_probe`), then the trial's
model assembled with its knobs, wrapped by the strategy, fed its own slice of each global batch,
with the knobs' evidence of its first step and the collectives of one steady step recorded. With
one process (world 1) it is the reference a parallel trial's losses are compared with."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from hpo.config.trial import ParallelSettings, TrialConfig
from hpo.engine import AssembledModel, run_step
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import observed_knobs
from hpo.parallel.group import rank_device
from hpo.parallel.rank_budget import budget_on_rank, carried
from hpo.parallel.rank_compile import checked_compile
from hpo.parallel.rank_probe import agreed_observation, probe_on_rank
from hpo.parallel.step_evidence import RecordedStep, recorded_step
from hpo.parallel.wrap import check_supported, knobs_on_rank, wrap_assembled
from hpo.workloads.base import Batch, Workload
from hpo.workloads.catalog import create_workload

__all__ = ["AfterStep", "batch_per_rank", "shard", "train_on_rank"]

# Called after each step with (rank, step): the launcher reports progress through it.
AfterStep = Callable[[int, int], None]


def batch_per_rank(global_batch: int, world: int) -> int:
    if global_batch % world:
        raise ValueError(f"params.batch_size {global_batch} is the global batch and must divide over {world} ranks")
    return global_batch // world


def shard(batch: Batch, rank: int, per_rank: int) -> Batch:
    """Rank r's rows of a global batch: every rank draws the same global batch and keeps its slice,
    so N ranks see exactly the samples one process would at that batch."""
    return {k: v[rank * per_rank : (rank + 1) * per_rank] for k, v in batch.items()}


@dataclass
class _Steps:
    """What a rank's steps left: each step's loss, the steady steps' seconds, the recorded step,
    the rows of its last batch, and the knobs its evidence step showed (agreed over the ranks)."""

    losses: list[torch.Tensor] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    recorded: RecordedStep | None = None
    rows_seen: int = 0
    knobs_observed: dict = field(default_factory=dict)


def train_on_rank(config: TrialConfig, rank: int = 0, world: int = 1, after_step: AfterStep | None = None) -> dict:
    """Train `config` as rank `rank` of `world` (a process group must be joined when world > 1)
    after every rank's probe passed (`hpo.parallel.rank_probe`); returns what this rank saw: the
    losses of the whole global batch per step, speed, memory, wire, the knobs observed, its probe."""
    settings = config.parallel or ParallelSettings()
    check_supported(config.knobs, settings)
    device = rank_device(config.device, rank)
    workload = create_workload(config.workload, config.workload_options)
    workload.bind_training(config.training.params())
    probe = probe_on_rank(workload, config, rank, world, device)
    assembled = _built(workload, config, settings, device, world)
    config, memory = budget_on_rank(assembled, config, rank, world)  # before any training step, unwrapped
    with carried(memory):
        _wrapped(assembled, config, settings, world)
        steps = _train_steps(assembled, config, rank, world, after_step)
        result = _result(assembled, settings, rank, world, _global_losses(steps.losses, world), steps)
        # Every rank evaluates (FSDP2 gathers its parameters for it); their metrics are the same.
        return {**result, "probe": probe, "memory": memory, "metrics": assembled.evaluate(), "n_params": assembled.n_params}


def _train_steps(assembled: AssembledModel, config: TrialConfig, rank: int, world: int, after_step: AfterStep | None) -> _Steps:
    """Every step on this rank's rows of each global batch; step 1 (0 with one step) records the
    collectives, which builds DDP's buckets at step 0, and step 0 before it captures the evidence."""
    global_batch, steps = config.training.batch_size, _Steps()
    per_rank = batch_per_rank(global_batch, world)
    batches = assembled.workload.train_batches(global_batch, config.seed)
    recorded_at = min(1, config.training.max_steps - 1)
    for step in range(config.training.max_steps):
        started = time.perf_counter()
        batch = assembled.move(shard(next(batches), rank, per_rank))
        steps.rows_seen = assembled.workload.samples_in(batch)
        if step == recorded_at:
            steps.losses.append(_recorded_step(assembled, _strategy(config, world), batch, step, steps))
        elif step == 0:  # before the recorded step: two profilers cannot run at once
            steps.losses.append(_evidence_step(assembled, config, batch, world, steps))
        else:
            steps.losses.append(run_step(assembled, batch, step))
        if step > recorded_at:  # steady: after the step that built buckets and the recorded one
            steps.step_s.append(time.perf_counter() - started)
        if after_step is not None:
            after_step(rank, step)
    return steps


def _strategy(config: TrialConfig, world: int) -> str | None:
    return config.parallel.strategy if world > 1 and config.parallel is not None else None


def _evidence_step(assembled: AssembledModel, config: TrialConfig, batch: Batch, world: int, steps: _Steps) -> torch.Tensor:
    """A training step captured as a one-process trial's evidence step is; its knobs observed are
    agreed over the ranks before any rank steps on (`agreed_observation` raises on every rank)."""
    with capture_step(assembled) as evidence:
        loss = run_step(assembled, batch, step=0)
    steps.knobs_observed = agreed_observation(observed_knobs(evidence), config.knobs, world)
    return loss


def _recorded_step(assembled: AssembledModel, strategy: str | None, batch: Batch, step: int, steps: _Steps) -> torch.Tensor:
    """A step with its evidence recorded; the gradients are looked at between backward and update."""
    with recorded_step(assembled, strategy, buckets_built=step > 0) as recorded:
        loss = run_step(assembled, batch, step, update=False)
        recorded.saw_gradients(assembled.model)
        assembled.optimizer_step()
    steps.recorded = recorded
    return loss


def _assembled(
    workload: Workload, config: TrialConfig, settings: ParallelSettings, device: torch.device, world: int
) -> AssembledModel:
    """The rank's model, built and wrapped by the strategy."""
    assembled = _built(workload, config, settings, device, world)
    _wrapped(assembled, config, settings, world)
    return assembled


def _built(
    workload: Workload, config: TrialConfig, settings: ParallelSettings, device: torch.device, world: int
) -> AssembledModel:
    torch.manual_seed(config.seed)  # the same initial weights on every rank (FSDP2 shards each rank's own)
    knobs = knobs_on_rank(config.knobs, settings) if world > 1 else config.knobs
    assembled = AssembledModel(workload, knobs, config.training, device)
    assembled.model.train()  # as hpo's one-process loop trains: a checkpoint may load in eval mode (transformers' does)
    return assembled


def _wrapped(assembled: AssembledModel, config: TrialConfig, settings: ParallelSettings, world: int) -> None:
    if world > 1:
        wrap_assembled(assembled, settings, config.knobs)


def _global_losses(losses: list[torch.Tensor], world: int) -> list[float]:
    """Each step's loss over the whole global batch: the mean of the ranks' losses (equal slices)."""
    stacked = torch.stack(losses).float()
    if world > 1:
        dist.all_reduce(stacked)
        stacked /= world
    return stacked.tolist()


def _result(
    assembled: AssembledModel, settings: ParallelSettings, rank: int, world: int, losses: list[float], steps: _Steps
) -> dict:
    global_batch, recorded, step_s = assembled.training.batch_size, steps.recorded, steps.step_s
    wire = recorded.wire
    return {
        "losses": losses,
        "global_batch": global_batch,
        "batch_per_rank": global_batch // world,
        # At the median steady step, as a one-process trial records it; None when none was timed.
        "samples_per_s": global_batch / statistics.median(step_s) if step_s else None,
        "peak_memory_mb": assembled.memory.peak_mb,
        "wire": wire,
        "collective_share": recorded.collective_share,
        "parallel_observed": recorded.observed,
        "compiled": checked_compile(assembled, rank),  # raises on a rank that trained no compiled graph
        "batch_per_rank_seen": steps.rows_seen,
        "knobs_observed": steps.knobs_observed,
        # With one step, that step records the collectives and nothing captures the knobs' evidence.
        "knobs_not_observed": None if steps.knobs_observed else "a trial of one step records its collectives in it",
        **_dtypes_seen(assembled, settings, wire),
    }


def _dtypes_seen(assembled: AssembledModel, settings: ParallelSettings, wire: dict) -> dict:
    """The parameter and reduce dtypes observed: under FSDP2 those of the all-gathers and the
    reduce-scatters; under DDP the parameters' own and those of the gradient all-reduces."""
    if settings.strategy == "fsdp":
        params, reduced = wire.get("all_gather", {}).get("dtypes"), wire.get("reduce_scatter", {}).get("dtypes")
    else:
        params = sorted({str(p.dtype).removeprefix("torch.") for p in assembled.model.parameters()})
        reduced = wire.get("all_reduce", {}).get("dtypes")
    return {"param_dtypes_seen": params or [], "reduce_dtypes_seen": reduced or []}
