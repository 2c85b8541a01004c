"""The model as the strategy trains it: DDP around it, or FSDP2's `fully_shard` on each block and
then the root, with the precision as a `MixedPrecisionPolicy`. Applied to an assembled model, so
the attention, optimizer and checkpointing knobs are applied as in a one-process trial."""

from __future__ import annotations

import dataclasses

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from hpo.config.trial import Knobs, ParallelSettings
from hpo.engine import AssembledModel
from hpo.errors import TrialRejected
from hpo.knobs.registry import PRECISION_SPECS
from hpo.verdicts import Kind, Verdict

__all__ = ["check_supported", "knobs_on_rank", "mixed_precision", "wrap_assembled"]

# fp32 master weights, gradients reduced in fp32: torchtitan's default policy for bf16 training.
_REDUCE_DTYPE = torch.float32


def check_supported(knobs: Knobs, settings: ParallelSettings) -> None:
    """Refuse what this package does not run yet, naming it, rather than run something else."""
    if knobs.compile:
        raise TrialRejected(
            Verdict.make(
                Kind.INCOMPATIBLE,
                f"systems.compile {knobs.compile!r} with systems.parallel is not supported yet; set compile: false",
                [("compile", knobs.compile)],
            )
        )
    if settings.strategy == "fsdp" and PRECISION_SPECS[knobs.precision].scaled:
        raise TrialRejected(
            Verdict.make(
                Kind.INCOMPATIBLE,
                f"precision {knobs.precision} needs a sharded GradScaler, which FSDP2 runs do not have yet; use bf16 or fp32",
                [("precision", knobs.precision)],
            )
        )


def knobs_on_rank(knobs: Knobs, settings: ParallelSettings) -> Knobs:
    """The knobs the assembled model applies itself. Under FSDP2 the precision is the mixed
    precision policy's job (parameters cast to its dtype), so no autocast region is added."""
    if settings.strategy == "fsdp":
        return dataclasses.replace(knobs, precision="fp32")
    return knobs


def mixed_precision(precision: str) -> MixedPrecisionPolicy:
    """FSDP2's policy for a precision knob: parameters gathered in its dtype, gradients reduced in fp32."""
    spec = PRECISION_SPECS[precision]
    if not spec.autocast:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=getattr(torch, spec.dtype), reduce_dtype=_REDUCE_DTYPE)


def wrap_assembled(assembled: AssembledModel, settings: ParallelSettings, precision: str) -> None:
    """Wrap in place: the assembled model's forward then runs through DDP or the sharded module."""
    if settings.strategy == "ddp":
        device_ids = [assembled.device] if assembled.device.type == "cuda" else None
        assembled.forward_model = DistributedDataParallel(
            assembled.model,
            device_ids=device_ids,
            bucket_cap_mb=settings.bucket_cap_mb,
            gradient_as_bucket_view=settings.gradient_as_bucket_view,
        )
        return
    policy = mixed_precision(precision)
    for block in assembled.workload.checkpoint_blocks(assembled.model):
        fully_shard(block, mp_policy=policy, reshard_after_forward=settings.reshard_after_forward)
    fully_shard(assembled.model, mp_policy=policy, reshard_after_forward=settings.reshard_after_forward)
    assembled.forward_model = assembled.model
    assembled.restart()  # the optimizer over the sharded parameters (DTensors) that replaced the full ones
