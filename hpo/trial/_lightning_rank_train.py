"""A Lightning workload's trial on one rank: hpo's launcher (`hpo.parallel.run_ranks(train=...)`)
calls `train_lightning_on_rank` in each rank it started, inside the group it joined. Every rank first
runs the probe hpo's own loop's ranks run (`hpo.parallel.rank_probe`: the one-process probe, as a
one-process Lightning trial runs it, at the rank's batch, agreed over the group, so a failing rank
ends every rank before any trains). Lightning's Trainer then fits there under its DDPStrategy
(`hpo.trial._lightning_ranks`), with the knobs mapped as in a one-process Lightning trial
(`hpo.trial._lightning_loop`). The rank's result has the keys hpo's own loop returns
(`hpo.parallel.rank_loop.train_on_rank`), its probe's included, so the launcher compares the ranks
and rank 0's side writes the record alike, plus `lightning`: what the Trainer ran."""

from __future__ import annotations

import dataclasses
import math

import torch.distributed as dist

from hpo.config.trial import TrialConfig
from hpo.errors import KnobUnavailable, TrialRejected
from hpo.hardware import seed_everything
from hpo.parallel.group import rank_device
from hpo.parallel.rank_loop import AfterStep, batch_per_rank
from hpo.parallel.rank_probe import probe_on_rank
from hpo.parallel.wrap import check_supported
from hpo.trial._lightning_loop import train_lightning
from hpo.trial._lightning_ranks import LightningRanks
from hpo.trial._trainer import TrainResult
from hpo.workloads.catalog import create_workload

__all__ = ["PROBE_UNDER_LIGHTNING_RANKS", "train_lightning_on_rank"]

# What the probe on a Lightning workload's ranks covers, recorded in `parallel.probe`: the probe of a
# one-process Lightning trial (the module's `training_step` under hpo's own step), on every rank.
PROBE_UNDER_LIGHTNING_RANKS = (
    "each rank ran the one-process probe on its own device at its own batch, before Lightning's Trainer started: "
    "the compared step ran the module's training_step through hpo's own step (hpo's autocast and GradScaler, hpo's "
    "AdamW of the knob's implementation), as a one-process Lightning trial's probe does, not through the Trainer's "
    "precision plugin, the module's configure_optimizers or DDPStrategy; it timed nothing, the reference's step "
    "neither (slow is judged under ranks only from this machine's stored fact that its CPU emulates the precision), "
    "and its verdict is not cached"
)


def train_lightning_on_rank(config: TrialConfig, rank: int, world: int, after_step: AfterStep | None = None) -> dict:
    """Fit `config`'s Lightning workload as `rank` of the `world` ranks of the joined group, once
    every rank's probe passed (else every rank raises the agreed verdict naming the failing rank)."""
    _check_joined(world)
    settings = config.parallel
    check_supported(config.knobs, settings)
    per_rank = batch_per_rank(config.training.batch_size, world)
    workload = create_workload(config.workload, config.workload_options)
    workload.bind_training(dataclasses.asdict(config.training))
    device = rank_device(config.device, rank)
    probe = probe_on_rank(workload, config, rank, world, device)
    seed_everything(config.seed)  # after the probe: the same initial weights and global batches on every rank
    ranks = LightningRanks(rank, world, settings, after_step)
    try:
        result = train_lightning(workload, config, device, ranks=ranks)
    except KnobUnavailable as exc:  # a verdict, as the one-process trial records it
        raise TrialRejected(exc.verdict) from exc
    return {**_rank_result(config, result, ranks, per_rank), "probe": probe}


def _check_joined(world: int) -> None:
    """Lightning must join hpo's group, never start its own: the group is initialized, at this size."""
    joined = dist.is_initialized() and dist.get_world_size() == world
    if not joined:
        size = dist.get_world_size() if dist.is_initialized() else None
        raise RuntimeError(f"a Lightning rank runs inside the launcher's group of {world} ranks; the group here is {size}")


def _rank_result(config: TrialConfig, result: TrainResult, ranks: LightningRanks, per_rank: int) -> dict:
    seen, global_batch = ranks.seen, config.training.batch_size
    wire = seen.get("wire", {})
    speed = result.steady_samples_per_s
    return {
        "global_batch": global_batch,
        "batch_per_rank": per_rank,
        "batch_per_rank_seen": seen.get("batch_per_rank_seen"),
        # Each rank's steady steps trained its slice; the group trained the global batch meanwhile.
        "samples_per_s": None if speed is None or math.isnan(speed) else speed * ranks.world,
        "peak_memory_mb": result.peak_mem_mb,
        "wire": wire,
        "collective_share": None,  # the profiler is hpo's evidence capture's in Lightning's steps
        "parallel_observed": _observed(ranks),
        "param_dtypes_seen": seen.get("param_dtypes", []),
        "reduce_dtypes_seen": wire.get("all_reduce", {}).get("dtypes", []),
        "metrics": result.metrics,
        "n_params": result.n_params,
        **_knobs_seen(result),
        "lightning": {k: seen.get(k) for k in ("strategy", "world_size", "global_rank", "precision", "model_wrapped_as")},
    }


def _knobs_seen(result: TrainResult) -> dict:
    """What the launcher compares and records of every rank's knobs, as hpo's own loop returns it."""
    return {
        "knobs_observed": result.knobs_observed,
        "knobs_not_observed": None if result.knobs_observed else "Lightning's steps showed no knob's evidence",
        "compiled": None,  # hpo's rank compile check is its own loop's (`hpo.parallel.rank_compile`)
    }


def _observed(ranks: LightningRanks) -> dict:
    """The DDP knobs' effects in the recorded step; None when no step was recorded (one step only)."""
    return {
        "bucket_cap_mb": ranks.seen.get("buckets"),
        "gradient_as_bucket_view": ranks.seen.get("gradients"),
        "reshard_after_forward": None,
    }
