"""What a trial of ranks records of its memory budget (`hpo.parallel.rank_budget`): the fields a
one-process trial records, for the rank that predicted the most (as `peak_mem_mb` is the largest
rank's), and each rank's beside them in `parallel`; with `batch_size: auto`, the global batch the
ranks agreed on and the learning rate scaled to it. Before launch, `batch_size: auto` is refused
where a one-process trial refuses it: no limit to fill, or a trainer other than hpo's loop."""

from __future__ import annotations

import torch

from hpo.config.trial import TrialConfig
from hpo.hardware import limit_bytes
from hpo.parallel import RanksOutcome
from hpo.records import RecordKey
from hpo.trial._memory_limit import refuse_auto_batch
from hpo.verify.peaks import at_batch

__all__ = ["check_auto_batch", "ranks_memory_attrs", "trained_config"]


def check_auto_batch(config: TrialConfig, trainer: str, device: torch.device) -> None:
    """`batch_size: auto` under ranks needs what it needs in one process (`refuse_auto_batch`)."""
    limit = limit_bytes(device, config.memory_limit_gb) if config.batch_auto is not None else None
    if limit is None or trainer != "hpo":
        refuse_auto_batch(config, trainer, device.type, limit)


def ranks_memory_attrs(config: TrialConfig, outcome: RanksOutcome) -> tuple[dict, dict]:
    """The trial's memory fields and their per-rank part of the `parallel` record, from the ranks'
    budget (none: no limit applied), whether they trained or agreed on `oom`."""
    every = _per_rank(outcome)
    if not every:
        return {}, {}
    top = max((seen for seen in every if seen), key=lambda seen: seen["predicted_peak_mb"])
    attrs = {
        RecordKey.MEMORY_LIMIT_MB: top["memory_limit_mb"],
        RecordKey.MEMORY_MODEL: top["memory_model"],
        RecordKey.PREDICTED_PEAK_MB: top["predicted_peak_mb"],
    }
    keys = ("predicted_peak_mb", "memory_model") + (("confirmed_peak_mb",) if config.batch_auto is not None else ())
    # None for a rank stopped before it wrote its record (a peer of the rank that failed in training).
    per_rank = {f"{key}_per_rank": [seen[key] if seen else None for seen in every] for key in keys}
    return attrs | _chosen(config, every), per_rank


def _per_rank(outcome: RanksOutcome) -> list[dict]:
    if outcome.ranks:
        return [result["memory"] for result in outcome.ranks if result.get("memory")]
    return (outcome.agreed or {}).get("memory_per_rank") or outcome.memory_per_rank


def trained_config(config: TrialConfig, outcome: RanksOutcome) -> TrialConfig:
    """The config the ranks trained: with `batch_size: auto`, at the global batch they agreed on
    (rank 0's, which every rank trained: `hpo.parallel.faults.disagreement`), its rate scaled."""
    if config.batch_auto is None or not outcome.ranks:
        return config
    return at_batch(config, outcome.ranks[0]["global_batch"])


def _chosen(config: TrialConfig, every: list[dict | None]) -> dict:
    """With `batch_size: auto`, the global batch the ranks agreed on (each rank's batch times the
    ranks), the learning rate and the config at it, as a one-process trial records them once it
    chose, whether it then trained or ended `oom`."""
    if config.batch_auto is None:
        return {}
    per_rank = next(seen for seen in every if seen)["batch_per_rank"]
    trained = at_batch(config, per_rank * config.parallel.processes)
    return {
        RecordKey.BATCH_SIZE_CHOSEN: trained.training.batch_size,
        RecordKey.LR_CHOSEN: trained.training.lr,
        RecordKey.CONFIG: trained.to_dict(),
    }
