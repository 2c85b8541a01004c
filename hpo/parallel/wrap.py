"""The model as the strategy trains it: DDP around it, or FSDP2's `fully_shard` on each block and
then the root, with the precision as a `MixedPrecisionPolicy`. Applied to an assembled model, so
the attention, optimizer and checkpointing knobs are applied as in a one-process trial; a compiled
trial compiles the wrapped module (`hpo.parallel.rank_compile`), and fp16 under FSDP2 scales its
loss with the sharded GradScaler (`hpo.parallel.sharded_scaling`)."""

from __future__ import annotations

import dataclasses

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from hpo.config.trial import Knobs, ParallelSettings
from hpo.engine import AssembledModel
from hpo.errors import TrialRejected
from hpo.knobs.registry import PRECISION_SPECS
from hpo.parallel.observe import MB
from hpo.parallel.rank_compile import compile_wrapped
from hpo.parallel.sharded_scaling import check_loss_scaling, scale_sharded_loss
from hpo.verdicts import Kind, Verdict

__all__ = ["check_supported", "knobs_on_rank", "mixed_precision", "wrap_assembled"]

# fp32 master weights, gradients reduced in fp32: torchtitan's default policy for bf16 training.
_REDUCE_DTYPE = torch.float32
# DDP's first gradient bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES in torch 2.13: 1 MiB),
# the size Dynamo's DDPOptimizer gives its first bucket under compile.
_FIRST_BUCKET_BYTES = 2**20


def check_supported(knobs: Knobs, settings: ParallelSettings) -> None:
    """Refuse what this package does not run yet, naming it, rather than run something else."""
    if knobs.compile and settings.strategy == "ddp" and settings.bucket_cap_mb * MB < _FIRST_BUCKET_BYTES:
        # DDPOptimizer (torch/_dynamo/backends/distributed.py) asserts that its first bucket, fixed
        # at DDP's default, is no larger than the others: the first compiled step would fail.
        raise TrialRejected(
            Verdict.make(
                Kind.INCOMPATIBLE,
                f"systems.compile with DDP needs systems.parallel.bucket_cap_mb >= {_FIRST_BUCKET_BYTES / MB:g} "
                f"(Dynamo's DDPOptimizer starts with a bucket of that size), got {settings.bucket_cap_mb:g}; "
                "raise it, or set compile: false",
                [("compile", knobs.compile), ("bucket_cap_mb", settings.bucket_cap_mb)],
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


def wrap_assembled(assembled: AssembledModel, settings: ParallelSettings, knobs: Knobs) -> None:
    """Wrap in place, for the trial's `knobs`: the assembled model's forward then runs through DDP
    or the sharded module, compiled when the trial is."""
    if settings.strategy == "ddp":
        device_ids = [assembled.device] if assembled.device.type == "cuda" else None
        wrapped = DistributedDataParallel(
            assembled.model,
            device_ids=device_ids,
            bucket_cap_mb=settings.bucket_cap_mb,
            gradient_as_bucket_view=settings.gradient_as_bucket_view,
        )
    else:
        _shard(assembled, settings, knobs.precision)
        wrapped = assembled.model
    assembled.forward_model = compile_wrapped(wrapped, assembled, knobs, settings.strategy)
    check_loss_scaling(assembled, settings.strategy, knobs.precision)


def _shard(assembled: AssembledModel, settings: ParallelSettings, precision: str) -> None:
    policy = mixed_precision(precision)
    for block in assembled.workload.checkpoint_blocks(assembled.model):
        fully_shard(block, mp_policy=policy, reshard_after_forward=settings.reshard_after_forward)
    fully_shard(assembled.model, mp_policy=policy, reshard_after_forward=settings.reshard_after_forward)
    assembled.restart()  # the optimizer over the sharded parameters (DTensors) that replaced the full ones
    if PRECISION_SPECS[precision].scaled:
        scale_sharded_loss(assembled)
