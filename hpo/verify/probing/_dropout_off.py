"""Train mode without randomness, for the probe's compared step.

The compared step runs in train mode, the mode training runs in: some modules refuse a backward
whose forward ran in eval mode (cuDNN's RNN: "cudnn RNN backward can only be called in training
mode", `aten/src/ATen/native/cudnn/RNN.cpp`, which captures train mode at forward time), others
change what they compute with it (batch norm's batch statistics), and a compiled model would
compile a graph for a mode it never trains in. Dropout must not draw for the comparison, though:
the reference and the trial would draw different masks (another kernel, another dtype, a
compiled graph's own random stream), and their losses would differ for that reason alone.

So every dropout probability in the model is set to 0 for the step and restored after it. Seeding
both runs identically was the alternative, and it does not work: SDPA's fused kernels, eager
attention's `F.dropout` and Inductor's Philox draw different masks from the same seed. The
probabilities a model uses are found in three forms:
- `nn.Dropout` and its siblings (`p`), which transformers' layers use, and which BERT's attention
  also reads as the SDPA/eager `dropout` argument (`self.dropout.p`);
- `nn.RNN`/`nn.LSTM`/`nn.GRU`'s `dropout` between layers;
- a float attribute whose name says dropout (`attention_dropout` in Llama-style transformers
  layers, hpo's own attention modules' `dropout`), passed to the attention function as `dropout_p`.
`tests/verify/test_probe_train_mode.py` proves the step deterministic for every built-in workload.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

__all__ = ["train_mode_without_dropout"]

# torch's dropout modules, named by their public classes (their shared base, _DropoutNd, is private);
# tests/verify/test_probe_train_mode.py checks this covers every Dropout class torch.nn exports.
_DROPOUT_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def _dropout_settings(model: nn.Module) -> list[tuple[object, str, float]]:
    """(owner, attribute, probability) for every non-zero dropout probability in `model`."""
    found = []
    for module in model.modules():
        if isinstance(module, _DROPOUT_MODULES):
            found.append((module, "p", module.p))
        for name, value in vars(module).items():
            if "dropout" in name and isinstance(value, float) and not isinstance(value, bool):
                found.append((module, name, value))
    return [(owner, name, value) for owner, name, value in found if value != 0.0]


@contextlib.contextmanager
def train_mode_without_dropout(model: nn.Module) -> Iterator[None]:
    """`model` in train mode with every dropout probability 0, then restored (the mode too)."""
    settings, was_training = _dropout_settings(model), model.training
    for owner, name, _ in settings:
        setattr(owner, name, 0.0)
    model.train()
    try:
        yield
    finally:
        for owner, name, value in settings:
            setattr(owner, name, value)
        model.train(was_training)
