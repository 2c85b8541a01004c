"""Does a precision train a model? A few AdamW steps under it on one batch, from the same weights
as fp32's, and that batch's loss before and after: a precision that trains the model lowers the
loss about as much as fp32 does. One batch, fitted: how far a few steps get depends on the
optimisation the precision changes, not on how well a model generalises after them.

The steps run through hpo's own assembled model (`hpo.engine.AssembledModel`: autocast,
fp16's GradScaler, clipping), the path a trial trains with; the loss is measured in fp32,
so every precision is measured with the same ruler.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from examples.zoo.matrix import trial_config
from examples.zoo.models import ZooModel
from hpo.engine import AssembledModel
from hpo.hardware import seed_everything
from hpo.verify.fault import REFERENCE_KNOBS
from hpo.workloads.catalog import create_workload

__all__ = ["STEPS", "LossDrop", "loss_drop"]

STEPS, LR = 8, 3e-3


@dataclass(frozen=True)
class LossDrop:
    precision: str
    before: float
    after: float

    @property
    def drop(self) -> float:
        return self.before - self.after


def loss_drop(model: ZooModel, precision: str, device: torch.device, steps: int = STEPS) -> LossDrop:
    """The batch's loss before and after `steps` steps on it under `precision` (other knobs: the reference's)."""
    config = trial_config(model, dataclasses.replace(REFERENCE_KNOBS, precision=precision), device)
    training = dataclasses.replace(config.training, lr=LR)
    workload = create_workload(model.workload, model.options)
    workload.bind_training(training.params())
    seed_everything(config.seed)
    assembled = AssembledModel(workload, config.knobs, training, device)
    batch = assembled.move(next(workload.train_batches(training.batch_size, config.seed)))
    before = _loss(workload, assembled, batch)
    for _ in range(steps):
        assembled.forward_backward(batch)
        assembled.optimizer_step()
    return LossDrop(precision, before, _loss(workload, assembled, batch))


def _loss(workload, assembled: AssembledModel, batch) -> float:
    with torch.no_grad():  # train mode, as in training: BatchNorm normalises with the batch's statistics
        return workload.training_loss(assembled.model, batch).item()
