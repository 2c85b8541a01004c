"""One rank's training: the trial's model assembled with its knobs, wrapped by the strategy, fed
its own slice of each global batch, with the collectives of one steady step recorded. With one
process (world 1) it is the reference a parallel trial's losses are compared with."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from hpo.config.trial import ParallelSettings, TrialConfig
from hpo.engine import AssembledModel, run_step
from hpo.parallel.group import rank_device
from hpo.parallel.rank_compile import checked_compile
from hpo.parallel.step_evidence import RecordedStep, recorded_step
from hpo.parallel.wrap import check_supported, knobs_on_rank, wrap_assembled
from hpo.workloads.base import Batch
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


def train_on_rank(config: TrialConfig, rank: int = 0, world: int = 1, after_step: AfterStep | None = None) -> dict:
    """Train `config` as rank `rank` of `world` (a process group must be joined when world > 1);
    returns what this rank saw: the losses of the whole global batch per step, speed, memory, wire."""
    settings = config.parallel or ParallelSettings()
    check_supported(config.knobs, settings)
    device = rank_device(config.device, rank)
    assembled = _assembled(config, settings, device, world)
    global_batch = config.training.batch_size
    per_rank = batch_per_rank(global_batch, world)
    batches = assembled.workload.train_batches(global_batch, config.seed)
    losses, step_s = [], []
    evidence_step = min(1, config.training.max_steps - 1)  # step 0 builds DDP's buckets
    for step in range(config.training.max_steps):
        started = time.perf_counter()
        batch = assembled.move(shard(next(batches), rank, per_rank))
        rows_seen = assembled.workload.samples_in(batch)
        if step == evidence_step:
            loss, recorded = _recorded_step(assembled, settings.strategy if world > 1 else None, batch, step)
            losses.append(loss)
        else:
            losses.append(run_step(assembled, batch, step))
        if step > evidence_step:  # steady: after the step that built buckets and the recorded one
            step_s.append(time.perf_counter() - started)
        if after_step is not None:
            after_step(rank, step)
    result = _result(assembled, settings, rank, world, _global_losses(losses, world), step_s, recorded)
    # Every rank evaluates (FSDP2 gathers its parameters for it); their metrics are the same.
    return {**result, "batch_per_rank_seen": rows_seen, "metrics": assembled.evaluate(), "n_params": assembled.n_params}


def _recorded_step(assembled: AssembledModel, strategy: str | None, batch: Batch, step: int) -> tuple[torch.Tensor, RecordedStep]:
    """A step with its evidence recorded; the gradients are looked at between backward and update."""
    with recorded_step(assembled, strategy, buckets_built=step > 0) as recorded:
        loss = run_step(assembled, batch, step, update=False)
        recorded.saw_gradients(assembled.model)
        assembled.optimizer_step()
    return loss, recorded


def _assembled(config: TrialConfig, settings: ParallelSettings, device: torch.device, world: int) -> AssembledModel:
    workload = create_workload(config.workload, config.workload_options)
    workload.bind_training(config.training.params())
    torch.manual_seed(config.seed)  # the same initial weights on every rank (FSDP2 shards each rank's own)
    knobs = knobs_on_rank(config.knobs, settings) if world > 1 else config.knobs
    assembled = AssembledModel(workload, knobs, config.training, device)
    assembled.model.train()  # as hpo's one-process loop trains: a checkpoint may load in eval mode (transformers' does)
    if world > 1:
        wrap_assembled(assembled, settings, config.knobs)
    return assembled


def _global_losses(losses: list[torch.Tensor], world: int) -> list[float]:
    """Each step's loss over the whole global batch: the mean of the ranks' losses (equal slices)."""
    stacked = torch.stack(losses).float()
    if world > 1:
        dist.all_reduce(stacked)
        stacked /= world
    return stacked.tolist()


def _result(
    assembled: AssembledModel,
    settings: ParallelSettings,
    rank: int,
    world: int,
    losses: list[float],
    step_s: list[float],
    recorded: RecordedStep,
) -> dict:
    global_batch = assembled.training.batch_size
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
