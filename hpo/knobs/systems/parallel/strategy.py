"""`systems.parallel.strategy`: how the ranks share the model, DistributedDataParallel (each rank
holds all of it and all-reduces the gradients) or FSDP2's `fully_shard` (each rank holds a shard and
gathers the parameters for each block's forward and backward). Applied by `hpo.parallel.wrap`;
observed as the collectives that crossed the wire (`hpo.parallel.wire`): all-reduces, or
all-gathers and reduce-scatters."""

from __future__ import annotations

from hpo.knobs.knob import ParallelKnob

__all__ = ["KNOB"]


class Strategy(ParallelKnob):
    name = "strategy"
    help = "how the ranks share the model: ddp (all-reduced gradients) or fsdp (FSDP2's fully_shard)"
    position = 10
    values = ("ddp", "fsdp")
    default = "ddp"
    reference = "ddp"
    value_type = str


KNOB = Strategy()
