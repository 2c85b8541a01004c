"""Lightning's side of a Lightning trial on ranks (`hpo.trial._lightning_ranks`, which imports this
module only for such a trial: it imports Lightning): the cluster environment that is the group hpo's
launcher joined, and the callback that sees what the Trainer ran on this rank."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.fabric.plugins.environments import ClusterEnvironment

from hpo.config.trial import TrialConfig
from hpo.parallel.observe import bucket_sizes, grads_in_buckets
from hpo.parallel.wire import CollectiveRecorder
from hpo.workloads.lightning import LightningWorkload, as_dict

__all__ = ["JoinedGroup", "RankWatch"]


class JoinedGroup(ClusterEnvironment):
    """Lightning's view of the group hpo joined: its processes created outside Lightning (so its
    launcher starts none) and already initialized (so Lightning skips `init_process_group`, and
    never reads the address and port)."""

    creates_processes_externally = True
    main_address = "127.0.0.1"
    main_port = 0

    def __init__(self, rank: int, world: int):
        super().__init__()
        self.rank, self.world = rank, world

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return self.world

    def set_world_size(self, size: int) -> None:
        if size != self.world:
            raise ValueError(f"Lightning asked for a world of {size} ranks; hpo's launcher started {self.world}")

    def global_rank(self) -> int:
        return self.rank

    def set_global_rank(self, rank: int) -> None:
        if rank != self.rank:
            raise ValueError(f"Lightning placed this process as rank {rank}; hpo's launcher started it as rank {self.rank}")

    def local_rank(self) -> int:
        return self.rank

    def node_rank(self) -> int:
        return 0


class RankWatch(pl.Callback):
    """Sees what the Trainer runs on this rank (into `ranks.seen`) and reports each step to the
    launcher. The collectives are recorded in step 1, once DDP rebuilt its buckets, and after hpo's
    evidence step 0: two dispatch modes entered by two callbacks in one hook would leave in the
    wrong order."""

    def __init__(self, ranks: Any, workload: LightningWorkload, config: TrialConfig):
        self.ranks, self.workload, self.recorder = ranks, workload, None
        self.wire_step = 1 if config.training.max_steps > 1 else None

    def on_fit_start(self, trainer, pl_module) -> None:
        self.ranks.seen |= {
            "strategy": type(trainer.strategy).__name__,
            "world_size": trainer.world_size,
            "global_rank": trainer.global_rank,
            "precision": trainer.precision,
            "model_wrapped_as": type(trainer.strategy.model).__name__,
            "param_dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in pl_module.parameters()}),
        }

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.wire_step:
            self.recorder = CollectiveRecorder().__enter__()

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.recorder is not None:  # after DDP's all-reduces, before the update
            grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
            self.ranks.seen["gradients"] = grads_in_buckets(grads, self.recorder.storages.get("all_reduce", set()))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.ranks.seen["batch_per_rank_seen"] = self.workload.samples_in(as_dict(batch))
        if self.recorder is not None:
            self._recorded(pl_module)
        if self.ranks.after_step is not None:
            self.ranks.after_step(self.ranks.rank, trainer.global_step - 1)

    def _recorded(self, pl_module) -> None:
        recorder, self.recorder = self.recorder, None
        recorder.__exit__(None, None, None)
        largest = max(p.numel() * p.element_size() for p in pl_module.parameters() if p.requires_grad)
        self.ranks.seen["wire"] = recorder.summary()
        self.ranks.seen["buckets"] = bucket_sizes(recorder.calls.get("all_reduce", []), largest)

    def on_exception(self, trainer, pl_module, exception) -> None:
        if self.recorder is not None:  # no dispatch mode outlives a step that raised
            self.recorder.__exit__(None, None, None)
            self.recorder = None
