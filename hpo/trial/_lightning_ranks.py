"""Where a Lightning trial's Trainer runs when the trial is N ranks (`systems.parallel`): on the
ranks hpo's launcher started and joined to one group (`hpo.parallel.launch`), never on processes
Lightning starts itself (its launcher would run hpo's command again as each new rank).

- strategy: Lightning's `DDPStrategy` with `devices=N`, the group's backend and timeout, and the
  trial's `bucket_cap_mb` and `gradient_as_bucket_view`; its cluster environment is the joined
  group, which says the processes were created outside Lightning, so its launcher starts none, and
  Lightning's own `init_process_group` finds the group already initialized and joins it as is.
- data: every rank draws the same global batches from the workload's seeded loader and keeps its
  own slice (`use_distributed_sampler=False`), as hpo's loop does (`hpo.parallel.rank_loop.shard`):
  N ranks train on exactly the rows one process would at that global batch.
- what ran: the Trainer's strategy, world size and precision, the model it wrapped, the rows each
  rank trained on and one steady step's collectives (`hpo.parallel.wire`), seen by a callback."""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from hpo.config.trial import ParallelSettings, TrialConfig
from hpo.parallel.group import backend_for
from hpo.parallel.rank_loop import AfterStep
from hpo.workloads.lightning import LightningWorkload, as_dict

__all__ = ["LightningRanks", "RankRows"]


@dataclass
class LightningRanks:
    """This process as `rank` of `world` for Lightning's Trainer; `seen` fills as the fit runs."""

    rank: int
    world: int
    settings: ParallelSettings
    after_step: AfterStep | None = None
    seen: dict[str, Any] = field(default_factory=dict)

    def trainer_args(self, device: torch.device) -> dict:
        """The Trainer's accelerator, devices and strategy (Lightning's names for them)."""
        from lightning.pytorch.strategies import DDPStrategy

        from hpo.trial._lightning_rank_hooks import JoinedGroup  # imports Lightning

        strategy = DDPStrategy(
            cluster_environment=JoinedGroup(self.rank, self.world),
            process_group_backend=backend_for(self.settings, device),
            timeout=datetime.timedelta(seconds=self.settings.collective_timeout_s),
            bucket_cap_mb=self.settings.bucket_cap_mb,
            gradient_as_bucket_view=self.settings.gradient_as_bucket_view,
        )
        accelerator = "gpu" if device.type == "cuda" else "cpu"
        return {"accelerator": accelerator, "devices": self.world, "strategy": strategy, "use_distributed_sampler": False}

    def rows_of_rank(self, loader, global_batch: int) -> RankRows:
        return RankRows(loader, self.rank, self.world, global_batch)

    def callback(self, workload: LightningWorkload, config: TrialConfig):
        from hpo.trial._lightning_rank_hooks import RankWatch  # imports Lightning

        return RankWatch(self, workload, config)


class RankRows:
    """This rank's rows of each global batch the loader yields (a tuple, list or mapping of tensors)."""

    def __init__(self, loader, rank: int, world: int, global_batch: int):
        self.loader, self.global_batch = loader, global_batch
        per_rank = global_batch // world
        self.rows = slice(rank * per_rank, (rank + 1) * per_rank)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            yield self._sliced(batch)

    def _sliced(self, batch: Any) -> Any:
        rows = len(next(iter(as_dict(batch).values())))
        if rows != self.global_batch:  # a short last batch would split unevenly: ranks would train apart
            raise ValueError(
                f"a rank's training loader must yield whole global batches of params.batch_size {self.global_batch} "
                f"rows, got one of {rows}; build it with drop_last=True"
            )
        if isinstance(batch, Mapping):
            return {k: v[self.rows] for k, v in batch.items()}
        return type(batch)(v[self.rows] for v in batch)
