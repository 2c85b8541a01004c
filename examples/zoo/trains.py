"""Does a precision train a model? A few AdamW steps under it, from the same weights on the same
batches as fp32's, and the loss on a held-out batch before and after: a precision that trains the
model lowers that loss about as much as fp32 does.

The steps run through hpo's own assembled model (`hpo.engine.assembly.AssembledModel`: autocast,
fp16's GradScaler, clipping), the path a trial trains with; the held-out loss is computed in fp32,
so every precision is measured with the same ruler.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from examples.zoo.matrix import trial_config
from examples.zoo.models import ZooModel
from hpo.engine.assembly import AssembledModel
from hpo.hardware.runtime import seed_everything
from hpo.verify.reference_knobs import REFERENCE_KNOBS
from hpo.workloads.registry import create_workload

__all__ = ["HELD_OUT_SEED", "STEPS", "LossDrop", "loss_drop"]

STEPS, LR, HELD_OUT_SEED = 8, 3e-3, 4321


@dataclass(frozen=True)
class LossDrop:
    precision: str
    before: float
    after: float

    @property
    def drop(self) -> float:
        return self.before - self.after


def loss_drop(model: ZooModel, precision: str, device: torch.device, steps: int = STEPS) -> LossDrop:
    """The held-out loss before and after `steps` steps under `precision` (other knobs: the reference's)."""
    config = trial_config(model, dataclasses.replace(REFERENCE_KNOBS, precision=precision), device)
    training = dataclasses.replace(config.training, lr=LR)
    workload = create_workload(model.workload, model.options)
    workload.bind_training(training.params())
    seed_everything(config.seed)
    assembled = AssembledModel(workload, config.knobs, training, device)
    held_out = assembled.move(next(workload.train_batches(training.batch_size, HELD_OUT_SEED)))
    before = _loss(workload, assembled, held_out)
    batches = workload.train_batches(training.batch_size, config.seed)
    for _ in range(steps):
        assembled.forward_backward(assembled.move(next(batches)))
        assembled.optimizer_step()
    return LossDrop(precision, before, _loss(workload, assembled, held_out))


def _loss(workload, assembled: AssembledModel, batch) -> float:
    with torch.no_grad():  # train mode, as in training: BatchNorm normalises with the batch's statistics
        return workload.training_loss(assembled.model, batch).item()
