"""The precision plugin, tested by what ran: the dtype autocast gave the layers, the loss scale the
gradients carried, and the GradScaler's scale backing off on an overflow."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hpo.knobs.precision_plugins import MixedPrecision, precision_plugin

CPU = "cpu"


def _layer() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(8, 4)


@pytest.mark.parametrize(
    "name,dtype,lightning",
    [("fp32", torch.float32, "32-true"), ("bf16", torch.bfloat16, "bf16-mixed"), ("fp16", torch.float16, "16-mixed")],
)
def test_forward_context_computes_in_the_precisions_dtype(name, dtype, lightning):
    plugin = precision_plugin(name, CPU)
    layer = plugin.convert_module(_layer())
    with plugin.forward_context():
        out = layer(torch.randn(2, 8))
    assert out.dtype == dtype
    assert layer.weight.dtype == torch.float32  # mixed precision keeps fp32 master weights
    assert plugin.lightning == lightning
    assert (plugin.scaler is not None) == (name == "fp16")
    assert isinstance(plugin, MixedPrecision) == (name != "fp32")


def test_fp32_enters_no_autocast_region():
    with precision_plugin("fp32", CPU).forward_context():
        assert not torch.is_autocast_enabled(CPU)


def test_fp16_backward_scales_the_loss_and_the_step_unscales():
    plugin, reference = precision_plugin("fp16", CPU), _layer()
    reference(torch.ones(1, 8)).sum().backward()
    layer = _layer()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    plugin.backward(layer(torch.ones(1, 8)).sum())
    scale = plugin.scaler.get_scale()
    assert scale > 1 and torch.allclose(layer.weight.grad, reference.weight.grad * scale)
    plugin.optimizer_step(optimizer)
    assert torch.allclose(layer.weight.grad, reference.weight.grad)  # unscaled before the step
    assert torch.allclose(layer.weight, reference.weight - 0.1 * reference.weight.grad)


def test_fp16_skips_an_overflowing_step_and_backs_off_the_scale():
    plugin, layer = precision_plugin("fp16", CPU), _layer()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    before, scale = layer.weight.detach().clone(), plugin.scaler.get_scale()
    plugin.backward(layer(torch.full((1, 8), float("inf"))).sum())
    plugin.optimizer_step(optimizer)
    assert plugin.scaler.get_scale() == scale * 0.5
    assert torch.equal(layer.weight, before)
    optimizer.zero_grad()
    plugin.backward(layer(torch.ones(1, 8)).sum())  # a finite step after it runs
    plugin.optimizer_step(optimizer)
    assert not torch.equal(layer.weight, before)


@pytest.mark.parametrize("name", ["fp32", "fp16"])
def test_clipping_works_in_the_losss_own_units(name):
    plugin, layer = precision_plugin(name, CPU), _layer()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.0)
    plugin.backward(100 * layer(torch.ones(1, 8)).sum())
    plugin.clip_gradients(layer, optimizer, max_norm=1.0)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in layer.parameters()]))
    assert norm == pytest.approx(1.0, rel=1e-3)
    plugin.optimizer_step(optimizer)  # the scaler takes the already-unscaled gradients as they are
    assert torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in layer.parameters()])) == pytest.approx(1.0, rel=1e-3)


def test_mixed_precision_without_a_scaler_steps_plainly():
    plugin, layer = MixedPrecision(torch.bfloat16, CPU), _layer()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    before = layer.weight.detach().clone()
    plugin.backward(layer(torch.ones(1, 8)).sum())
    plugin.optimizer_step(optimizer)
    assert plugin.lightning == "bf16-mixed" and not torch.equal(layer.weight, before)


def test_an_unknown_precision_names_the_valid_ones():
    with pytest.raises(KeyError, match=r"precision must be one of \['fp32', 'bf16', 'fp16'\], got 'fp8'"):
        precision_plugin("fp8", CPU)


@pytest.mark.parametrize("name,dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_a_renewed_plugin_computes_as_before_with_a_fresh_scaler(name, dtype):
    plugin = precision_plugin(name, CPU)
    renewed = plugin.renewed()
    layer = renewed.convert_module(_layer())
    with renewed.forward_context():
        assert layer(torch.randn(2, 8)).dtype == dtype
    assert type(renewed) is type(plugin) and renewed.lightning == plugin.lightning
    if name == "fp16":  # a GradScaler of its own: a restarted trial starts from the initial scale
        assert type(renewed.scaler) is torch.amp.GradScaler and renewed.scaler is not plugin.scaler
    else:
        assert renewed.scaler is None
