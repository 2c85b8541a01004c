"""Each precision trains every zoo model: a few steps under bf16 and fp16 on one batch lower its
loss about as much as fp32's, from the same weights. A probe that rejects one of
these precisions on one of these models gives a false verdict (tests/zoo/test_zoo_probe.py)."""

from __future__ import annotations

import pytest
import torch

from examples.zoo.models import ZOO
from examples.zoo.trains import loss_drop

pytestmark = pytest.mark.slow

CPU = torch.device("cpu")
LIKE_FP32 = 0.5  # the share of fp32's drop a precision must reach


@pytest.mark.parametrize("name", list(ZOO))
def test_half_precisions_lower_the_loss_like_fp32(name):
    fp32 = loss_drop(ZOO[name], "fp32", CPU)
    assert fp32.drop > 0.02 * fp32.before, fp32  # the task is learnable in these steps, or nothing is measured
    for precision in ("bf16", "fp16"):
        drop = loss_drop(ZOO[name], precision, CPU)
        assert drop.before == pytest.approx(fp32.before), drop  # the same weights and batch
        assert drop.drop >= LIKE_FP32 * fp32.drop, (drop, fp32)
