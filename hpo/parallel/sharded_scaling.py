"""fp16 under FSDP2: the mixed precision policy gathers fp16 parameters (no autocast region), and
the loss is scaled by torch's `ShardedGradScaler`. Each rank holds only its shard of the gradients,
so a plain GradScaler would see an overflow on one rank only and skip the step there alone, the
shards of one model then stepping apart; the sharded scaler all-reduces its inf flag over the group
before it steps, so every rank skips or steps together (its all-reduce shows on the wire)."""

from __future__ import annotations

import contextlib
import re
import warnings

import torch
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

from hpo.engine import AssembledModel
from hpo.errors import TrialRejected
from hpo.knobs.precision_plugins import MixedPrecision
from hpo.knobs.registry import PRECISION_SPECS
from hpo.verdicts import Kind, Verdict

__all__ = ["DTENSOR_SCALAR_WARNING", "ShardedLossScaling", "check_loss_scaling", "scale_sharded_loss"]

# torch 2.13's ShardedGradScaler unscales DTensor gradients with its found_inf and inv_scale of
# shape (1,); DTensor replicates each, as the scaler means, and warns on every unscale that the
# caller should pass a scalar (torch/distributed/tensor/_dispatch.py,
# `_try_replicate_spec_for_scalar_tensor`). The caller is torch's own scaler: nothing for a user to
# change, so this one warning is ignored around hpo's unscale, and every other passes through.
DTENSOR_SCALAR_WARNING = "Found a non-scalar tensor with numel=1 and ndim!=0"


class ShardedLossScaling(MixedPrecision):
    """fp16 as FSDP2 trains it: the policy casts the parameters, so forward enters no autocast
    region; backward, clipping and the step are MixedPrecision's, with the sharded scaler."""

    def __init__(self, device_type: str):
        super().__init__(torch.float16, device_type, ShardedGradScaler(device=device_type))

    def forward_context(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def renewed(self) -> ShardedLossScaling:
        return ShardedLossScaling(self.device_type)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=re.escape(DTENSOR_SCALAR_WARNING), category=UserWarning)
            super().unscale_gradients(optimizer)


def scale_sharded_loss(assembled: AssembledModel) -> None:
    """Give the sharded model the sharded loss scaling; a later `restart` renews it (a fresh sharded
    scaler), as it renews a one-process trial's GradScaler."""
    assembled.precision = ShardedLossScaling(assembled.device.type)
    assembled.scaler = assembled.precision.scaler


def check_loss_scaling(assembled: AssembledModel, strategy: str, precision: str) -> None:
    """Refuse an fp16 FSDP2 trial whose loss is not scaled by the sharded GradScaler: its ranks
    would skip overflowing steps each on its own shard's evidence."""
    if strategy != "fsdp" or not PRECISION_SPECS[precision].scaled:
        return
    if isinstance(assembled.scaler, ShardedGradScaler) and assembled.precision.scaler is assembled.scaler:
        return
    detail = (
        f"precision {precision} under FSDP2 needs torch's ShardedGradScaler (the inf flag agreed over the "
        f"ranks), but the trial's scaler is {type(assembled.scaler).__name__}; fix hpo.parallel.sharded_scaling"
    )
    raise TrialRejected(Verdict.make(Kind.ERROR, detail))
