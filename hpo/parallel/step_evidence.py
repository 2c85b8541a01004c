"""The one recorded step of a rank: its collectives (the wire), the share of it they were in
flight, and each parallel knob's observed effect (`hpo.parallel.observe`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch.distributed.tensor import DTensor

from hpo.engine import AssembledModel
from hpo.parallel.collective_time import timed_collectives
from hpo.parallel.observe import blocks_gathered, bucket_sizes, grads_in_buckets, holds_gathered_parameters
from hpo.parallel.wire import CollectiveRecorder
from hpo.torch_compat import in_backward_pass

__all__ = ["KNOBS", "RecordedStep", "recorded_step"]

# The knobs whose effect a recorded step observes, in `systems.parallel`.
KNOBS = ("bucket_cap_mb", "gradient_as_bucket_view", "reshard_after_forward")


@dataclass
class RecordedStep:
    """Complete when the `recorded_step` block ends; `saw_gradients` is called inside it, after
    backward and before the update."""

    wire: dict = field(default_factory=dict)
    collective_share: float | None = None
    observed: dict[str, dict | None] = field(default_factory=dict)
    gradients: dict | None = None
    recorder: CollectiveRecorder = field(default_factory=CollectiveRecorder)

    def saw_gradients(self, model: torch.nn.Module) -> None:
        """Where the gradients live now, after DDP's all-reduces and before the update clears them
        (FSDP2's are sharded DTensors, and no knob of its asks)."""
        if any(isinstance(p, DTensor) for p in model.parameters()):
            return
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        self.gradients = grads_in_buckets(grads, self.recorder.storages.get("all_reduce", set()))


@contextlib.contextmanager
def recorded_step(assembled: AssembledModel, strategy: str | None, buckets_built: bool) -> Iterator[RecordedStep]:
    """Record the step run inside; `strategy` is None for one process, which no strategy wraps.
    `buckets_built`: DDP has rebuilt its buckets by the cap (it does after its first step, which
    reduces every gradient in one bucket)."""
    step = RecordedStep()
    after_forward: list[bool] = []
    handles = _watch_blocks(assembled, after_forward) if strategy == "fsdp" else []
    try:
        with timed_collectives(assembled.device) as timed, step.recorder:
            yield step
    finally:
        for handle in handles:
            handle.remove()
    step.wire, step.collective_share = step.recorder.summary(), timed.share
    step.observed = _observed(assembled, strategy, step, after_forward, buckets_built)


def _watch_blocks(assembled: AssembledModel, after_forward: list[bool]) -> list:
    """A hook after FSDP2's own post-forward hook on each sharded block (hooks run in the order
    registered): what the block holds once its forward, resharding included, has ended."""

    def ended(block: torch.nn.Module, args, output) -> None:
        if not in_backward_pass():  # a checkpointed block's recompute is not its forward
            after_forward.append(holds_gathered_parameters(block))

    return [block.register_forward_hook(ended) for block in assembled.workload.checkpoint_blocks(assembled.model)]


def _observed(
    assembled: AssembledModel, strategy: str | None, step: RecordedStep, after_forward: list[bool], buckets_built: bool
) -> dict[str, dict | None]:
    """Each knob's observation; None for a knob with nothing to act on: the other strategy's, or
    every knob in one process."""
    if strategy is None:
        return dict.fromkeys(KNOBS)
    if strategy == "fsdp":
        return {"bucket_cap_mb": None, "gradient_as_bucket_view": None, "reshard_after_forward": blocks_gathered(after_forward)}
    largest = max(p.numel() * p.element_size() for p in assembled.model.parameters() if p.requires_grad)
    buckets = bucket_sizes(step.recorder.calls.get("all_reduce", []), largest) if buckets_built else None
    return {"bucket_cap_mb": buckets, "gradient_as_bucket_view": step.gradients, "reshard_after_forward": None}
