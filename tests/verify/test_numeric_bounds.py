"""The probe judges a trial's numerics against this model's own rounding floor: a precision that
trains a model is never rejected for the model's sensitivity, and a broken kernel still fails."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.trial import execute
from hpo.verdicts import Kind
from hpo.verify.probing._bounds import FLOOR_FACTOR, ORDER_ONE, Errors, bound_from_floor
from hpo.verify.probing._probe import BATCH_STATISTICS_SAMPLES, PROBE_SAMPLES, compared_samples, run_probe
from hpo.verify.probing._rounding import RoundedTo, round_mantissa
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")
RESNET = "numerics_workloads:ResNet"


def config(workload: str, precision: str = "bf16", **options):
    knobs = Knobs(precision=precision, attention="eager", optimizer="forloop")
    return dataclasses.replace(toy_config(knobs, **options), workload=workload)


def probe(cfg):
    return run_probe(create_workload(cfg.workload, cfg.workload_options), cfg, CPU, timed=False)


def test_rounding_to_7_and_10_bits_is_bf16_and_fp16():
    x = torch.randn(10_000) * 100
    assert torch.equal(round_mantissa(x, 7), x.bfloat16().float())
    assert torch.equal(round_mantissa(x, 10), x.half().float())  # within fp16's range
    assert torch.equal(round_mantissa(x, 23), x)
    special = torch.tensor([float("inf"), float("-inf"), float("nan")])
    assert round_mantissa(special, 7).isinf()[:2].all() and round_mantissa(special, 7)[2].isnan()


def test_inside_rounded_to_every_value_an_op_produces_is_rounded_forward_and_backward():
    x = torch.randn(8, 8, requires_grad=True)
    w = torch.randn(8, 8)
    with RoundedTo(7):
        y = (x @ w).exp()
        y.sum().backward()
    assert torch.equal(y.detach(), y.detach().bfloat16().float())
    assert torch.equal(x.grad, x.grad.bfloat16().float())
    assert not torch.equal(y.detach(), (x.detach() @ w).exp())  # what fp32 alone computes differs


def test_the_bound_follows_the_floor_between_roundoff_and_order_one():
    tight, loose = bound_from_floor("bf16", Errors(0.0, 0.001)), bound_from_floor("bf16", Errors(0.01, 0.05))
    assert tight.bound.grad == pytest.approx(8 * 2**-8)  # eight units of bf16's roundoff, not 8 x the floor's 0.001
    assert FLOOR_FACTOR == 8.0 and loose.bound == Errors(0.08, 0.4)
    assert bound_from_floor("bf16", Errors(0.5, 0.9)).bound == Errors(ORDER_ONE, ORDER_ONE)
    assert bound_from_floor("fp16", Errors(0.0, 0.0)).bound.grad < tight.bound.grad  # fp16 keeps 3 more bits
    assert bound_from_floor("fp32", Errors(0.0, 0.0)).bound == Errors(1e-3, 1e-2)  # kernels' summation order
    assert loose.exceeded_by(Errors(0.01, 0.5)).startswith("gradients differ from fp32/eager by 0.5 (bound 0.4 for bf16")
    assert loose.exceeded_by(Errors(0.01, 0.39)) is None


def test_a_batchnorm_model_gets_a_fair_compared_batch():
    resnet = create_workload(RESNET, {})
    assert compared_samples(config(RESNET), resnet.build_model("eager")) == BATCH_STATISTICS_SAMPLES
    assert (
        compared_samples(config(RESNET, norm="layer"), create_workload(RESNET, {"norm": "layer"}).build_model("eager"))
        == PROBE_SAMPLES
    )


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_batchnorm_resnet_is_judged_against_its_own_floor_and_passes(precision):
    """transformers' ResNet: bf16's gradients differ from fp32's by about 0.33 at 16 samples, over
    any one constant per precision that still catches a kernel 10% wrong on a transformer; and
    fp16's scaled gradients overflow at the first loss scale, as loss scaling expects."""
    result = probe(config(RESNET, precision))
    assert result.ok, result.verdict
    assert result.grad_floor > (0.2 if precision == "bf16" else 0.05)  # the model amplifies rounding
    assert result.grad_rel_err <= result.grad_bound <= ORDER_ONE
    assert result.grad_bound == min(ORDER_ONE, FLOOR_FACTOR * result.grad_floor)


def test_bf16_trains_the_batchnorm_resnet_as_fp32_does():
    """What "the precision trains the model" means: a few steps lower the loss under both."""
    losses = {}
    for precision in ("fp32", "bf16"):
        cfg = config(RESNET, precision)
        cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, lr=3e-3, max_steps=8, eval_every=8))
        outcome = execute(cfg, MemoryVerdicts())
        assert outcome.ok, outcome.verdict
        losses[precision] = outcome.attrs["metrics"]["val_loss"]
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.05)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_kernel_ten_percent_wrong_under_autocast_is_rejected_on_a_layernorm_model(precision):
    """Its gradient error (about 0.07) is far beyond what rounding explains on this model (under
    0.006), though under the 0.25 a constant bf16 bound needed elsewhere."""
    cfg = config("numerics_workloads:SkewedToy", precision)
    outcome = execute(cfg, MemoryVerdicts())
    assert outcome.verdict.kind is Kind.INCOMPATIBLE, outcome.verdict
    assert outcome.verdict.implicates == (("precision", precision),)
    assert "gradients differ from fp32/eager by" in outcome.verdict.detail and "on this model" in outcome.verdict.detail
    assert outcome.attrs["probe_blame"] == "differential"


def test_a_trial_records_its_floor_and_bound_beside_its_errors():
    outcome = execute(config("toy_workloads:Toy"), MemoryVerdicts())
    attrs = outcome.attrs
    assert 0 < attrs["probe_grad_floor"] < attrs["probe_grad_bound"] and attrs["probe_grad_rel_err"] <= attrs["probe_grad_bound"]
    assert attrs["probe_loss_bound"] >= attrs["probe_loss_floor"] >= 0
    fp32 = execute(config("toy_workloads:Toy", "fp32"), MemoryVerdicts()).attrs
    assert (fp32["probe_grad_floor"], fp32["probe_grad_bound"]) == (0.0, 1e-2)
