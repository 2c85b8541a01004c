"""Start a trial's N ranks with torch's own machinery and watch them to the end.

The launcher holds the rendezvous: a `torch.distributed.TCPStore` server, on a port the OS picks
unless the config names one. `torch.multiprocessing.start_processes` spawns the ranks; each joins
the group through the store (`hpo.parallel.group`), agrees on rank 0's config, trains, and writes
its result (or its error) and its progress into the store. Only the launcher reads them, so rank 0's
side writes the trial's record. When one rank fails, or the deadline passes, the others are
stopped (SIGTERM, then SIGKILL) and every process is joined before this returns."""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist
import torch.multiprocessing

from hpo.config.resolve import fixed_config
from hpo.config.space import parse_space
from hpo.config.trial import ParallelSettings, TrialConfig
from hpo.parallel.agreement import agree_on_config
from hpo.parallel.effects import contradiction
from hpo.parallel.faults import RankExits, agreed_error, classify, describe_error, disagreement
from hpo.parallel.group import connect_store, die_with_parent, joined_group, quiet_threads, rank_device
from hpo.parallel.rank_loop import AfterStep, train_on_rank
from hpo.parallel.rank_memory import rank_memory_limit
from hpo.parallel.rank_processes import stop_ranks, watch_ranks
from hpo.verdicts import Kind, Verdict

__all__ = ["RankTrain", "RanksOutcome", "run_ranks"]

# What a rank runs once it joined the group: (config, rank, world, after_step) -> its result. hpo's
# own loop by default; a Lightning workload's trials pass Lightning's (hpo.trial), which this layer
# cannot import. Module level, so the spawned ranks find it by name.
RankTrain = Callable[[TrialConfig, int, int, AfterStep | None], dict]

HOST = "127.0.0.1"


# What the trial records of rank 0's result as it is (every rank saw the same, or the trial failed).
_RANK_0_KEYS = (
    "global_batch",
    "batch_per_rank",
    "batch_per_rank_seen",
    "samples_per_s",
    "wire",
    "param_dtypes_seen",
    "reduce_dtypes_seen",
    "knobs_not_observed",
)


@dataclass
class RanksOutcome:
    verdict: Verdict
    ranks: list[dict] = field(default_factory=list)  # each rank's result, by rank (empty unless all ended ok)
    last_steps: dict[int, int] = field(default_factory=dict)  # the last step each rank reported
    # A verdict the ranks agreed on, as rank 0 recorded it: with the failing rank's traceback, rank
    # 0's observed knobs or the probe's seconds, where it has them.
    agreed: dict | None = None
    # Each rank's memory budget (`hpo.parallel.rank_budget`) as its error carried it, by rank (None:
    # a rank stopped before it wrote one), when a rank failed after its budget: what it predicted.
    memory_per_rank: list[dict] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """What the trial records about its ranks: rank 0's view plus every rank's peak memory,
        collective share and compiled graphs."""
        if not self.ranks:
            return {}
        first = self.ranks[0]
        per_rank = {
            f"{key}_per_rank": [r.get(key) for r in self.ranks] for key in ("peak_memory_mb", "collective_share", "compiled")
        }
        return {
            **{k: first[k] for k in _RANK_0_KEYS},
            **per_rank,
            "probe_s_per_rank": first["probe"]["probe_s_per_rank"] if "probe" in first else None,
            "peak_memory_mb_max": max(per_rank["peak_memory_mb_per_rank"]),
        }


def run_ranks(
    config: TrialConfig,
    *,
    own_configs: list[dict] | None = None,
    after_step: AfterStep | None = None,
    deadline_s: float | None = None,
    train: RankTrain = train_on_rank,
) -> RanksOutcome:
    """Run `config` as `config.parallel.processes` ranks, each training with `train`. `own_configs`
    (by rank; default: the config on every rank) is what each rank is handed; `after_step` is called
    in each rank after each step; both functions must be picklable (module-level)."""
    settings = config.parallel
    try:
        store = _open_store(settings)
    except dist.DistNetworkError as exc:
        return _port_refused(settings, exc)
    try:
        payloads = own_configs or [config.to_dict()] * settings.processes
        return _run(store, settings, payloads, (train, after_step), deadline_s)
    finally:
        del store  # the server's socket closes with its last reference: no port stays bound


def _open_store(settings: ParallelSettings) -> dist.TCPStore:
    """The rendezvous server the ranks join, on `settings.port` or one the OS picks."""
    return dist.TCPStore(
        HOST,
        settings.port or 0,
        None,
        True,
        timeout=datetime.timedelta(seconds=settings.collective_timeout_s),
        wait_for_workers=False,
    )


def _port_refused(settings: ParallelSettings, exc: dist.DistNetworkError) -> RanksOutcome:
    """The trial's error when the rendezvous cannot listen on its port: no rank was started."""
    return RanksOutcome(
        Verdict.make(
            Kind.ERROR,
            f"systems.parallel.port: cannot listen on {HOST}:{settings.port} "
            f"({_reason(exc)}); free it, or leave port unset so the OS picks a free one",
        )
    )


def _run(
    store: dist.TCPStore,
    settings: ParallelSettings,
    payloads: list[dict],
    steps: tuple[RankTrain, AfterStep | None],
    deadline_s: float | None,
) -> RanksOutcome:
    """Start the ranks, watch them to their end, stop any left, and read what they wrote."""
    context = torch.multiprocessing.start_processes(
        _rank_main,
        args=(settings.processes, store.port, os.getpid(), payloads, settings.collective_timeout_s, steps),
        nprocs=settings.processes,
        join=False,
        start_method="spawn",
    )
    try:
        seen = watch_ranks(context.processes, deadline_s, settings.collective_timeout_s)
    finally:  # also on Ctrl-C or an error here: no rank outlives its launcher
        stopped = stop_ranks(context.processes)
    seen.stopped = stopped
    seen = _read_store(store, seen)
    if seen.exits or seen.errors or seen.deadline_s is not None:
        carried = [seen.errors.get(rank, {}).get("memory") for rank in range(seen.world)]
        memory = carried if any(carried) else []
        return RanksOutcome(classify(seen), last_steps=seen.progress, agreed=agreed_error(seen), memory_per_rank=memory)
    results = [json.loads(store.get(f"result/{r}")) for r in range(settings.processes)]
    verdict = disagreement(results) or contradiction(results, settings) or Verdict.make(Kind.OK)
    return RanksOutcome(verdict, results, seen.progress)


def _rank_main(
    rank: int,
    world: int,
    port: int,
    launcher_pid: int,
    payloads: list[dict],
    timeout_s: float,
    steps: tuple[RankTrain, AfterStep | None],
) -> None:
    """A rank's whole life; what ends it is written to the store before it exits nonzero."""
    train, after_step = steps
    die_with_parent(launcher_pid)
    quiet_threads()
    store = connect_store(HOST, port, timeout_s)
    reported = _reporting(store, after_step)
    try:
        own = payloads[rank]
        settings = fixed_config(parse_space(own, f"rank {rank}'s config")).parallel
        device = rank_device(own["systems"].get("device", "auto"), rank)
        with joined_group(store, rank, world, settings, device):
            config = fixed_config(parse_space(agree_on_config(own, rank, world), "rank 0's config"))
            with rank_memory_limit(device, config.memory_limit_gb):
                result = train(config, rank, world, reported)
        store.set(f"result/{rank}", json.dumps(result))
    except BaseException as exc:
        store.set(f"error/{rank}", json.dumps(describe_error(exc)))
        raise


def _reporting(store: dist.Store, after_step: AfterStep | None) -> AfterStep:
    """Each step's progress written to the store, then `after_step` (a test's hook) called."""

    def reported(rank: int, step: int) -> None:
        store.set(f"progress/{rank}", str(step))
        if after_step is not None:
            after_step(rank, step)

    return reported


def _read_store(store: dist.TCPStore, seen: RankExits) -> RankExits:
    for rank in range(seen.world):
        if store.check([f"error/{rank}"]):
            seen.errors[rank] = json.loads(store.get(f"error/{rank}"))
        if store.check([f"progress/{rank}"]):
            seen.progress[rank] = int(store.get(f"progress/{rank}"))
    return seen


def _reason(exc: Exception) -> str:
    text = str(exc)
    return "address already in use" if "EADDRINUSE" in text else " ".join(text.split())[:200]
