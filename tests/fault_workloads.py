"""The toy workload with one fault injected on purpose, for the fault matrix
(`tests/faults/test_fault_matrix.py`): `fault_workloads:Faulty` with `fault` set to

- `loss_in_probe`: the loss raises in the probe's compared step (call 0, the reference's), a workload bug;
- `loss_in_training`: the loss raises in training, a workload bug: only when the training loop
  (`hpo.trial._trainer`) computes it. The probe's steps run in train mode like training's, and its
  reference timing runs eager fp32 at the full batch, as a study's eager trial trains: neither the
  mode, the batch nor the model tells them apart, only the caller;
- `data`: the training batches raise at batch `at_batch` (0: in the probe's own fetch);
- `under_bf16`: the loss raises only under bf16 autocast, with a message no upstream contract names,
  so only a differential run can blame bf16;
- `transient`: the loss raises at call `at_call` (the reference's step is call 0) while the file
  `once` does not exist, and creates it: a transient error that passes on retry;
- `sticky`: building the model with attention `sticky_attention` raises CUDA's illegal-address
  error and poisons the process: every later model built in it raises the same, as a real CUDA
  context does after such an error, until the process ends.

NaN is the toy's own `nan_at_step`; a hang is `crashy_workloads`' `misbehave: hang`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from hpo.workloads.base import Batch
from toy_workloads import Toy, ToyOptions


@dataclass(frozen=True, kw_only=True)
class FaultyOptions(ToyOptions):
    fault: str = "none"
    at_batch: int = 0
    at_call: int = 0
    once: str = ""
    sticky_attention: str = "sdpa"


TRAINING_LOOP = "hpo.trial._trainer"
STICKY = "CUDA error: an illegal memory access was encountered"
_poisoned = False  # this process's device, after a sticky error


def _in_training_loop() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == TRAINING_LOOP:
            return True
        frame = frame.f_back
    return False


class Faulty(Toy):
    Options = FaultyOptions

    def __init__(self, options: FaultyOptions):
        super().__init__(options)
        self.calls = 0

    def build_model(self, attention: str):
        global _poisoned
        if self.options.fault == "sticky" and (_poisoned or attention == self.options.sticky_attention):
            _poisoned = True
            raise RuntimeError(STICKY)
        return super().build_model(attention)

    def training_loss(self, model, batch):
        fault, call = self.options.fault, self.calls
        self.calls += 1
        if fault == "loss_in_probe" and call == 0:
            raise KeyError("label column 'topic' is missing from the batch")
        if fault == "loss_in_training" and _in_training_loop():
            raise ValueError("the user's loss divides by an empty mask")
        if fault == "under_bf16" and torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16:
            raise RuntimeError("my_fused_block: refused its input")
        if fault == "transient" and call == self.options.at_call and not os.path.exists(self.options.once):
            open(self.options.once, "w").close()
            raise ConnectionResetError("connection to the feature store reset by peer")
        return super().training_loss(model, batch)

    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]:
        for index, batch in enumerate(super().train_batches(batch_size, seed)):
            if self.options.fault == "data" and index == self.options.at_batch:
                raise OSError(f"corrupt record at batch {index}")
            yield batch
