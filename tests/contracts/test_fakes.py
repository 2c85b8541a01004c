"""hpo's knob builders, evidence and probe against CPU references of flash-attn, xformers and apex
that keep the upstream signatures, checks, messages and profiler names (tests/contracts/fakes)."""

from __future__ import annotations

import pytest
import torch
from conftest import toy_config
from torch.profiler import ProfilerActivity, profile

from contracts.upstream import MESSAGES
from hpo import deps
from hpo.config.trial import Knobs
from hpo.evidence.capture import ops_seen
from hpo.evidence.observe import StepEvidence, observed_knobs
from hpo.knobs.adamw_builders import build_optimizer, clear_grads
from hpo.knobs.attention_kernels import attention_function, eager_attention
from hpo.trial import execute
from hpo.verdicts import Kind
from hpo.verify.fault import match_known_failure
from hpo.verify.probing import run_probe
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")


def _qkv(dtype=torch.bfloat16, b=2, h=2, s=8, d=16):
    torch.manual_seed(0)
    return [torch.randn(b, h, s, d, dtype=dtype, requires_grad=True) for _ in range(3)]


def _attention_observed(fn, *args, **kwargs) -> tuple[str | None, set[str]]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(*args, **kwargs).float().sum().backward()
    ops, _ = ops_seen(prof, inside="Optimizer.step#")
    return observed_knobs(StepEvidence(profiler_ops=ops))["attention"], ops


@pytest.mark.parametrize("backend", ["flash_attn", "xformers"])
def test_builder_matches_eager_and_reads_as_itself(gpu_fakes, backend):
    q, k, v = _qkv()
    fn = attention_function(backend)
    expected = eager_attention(*(t.float() for t in (q, k, v)), is_causal=True)
    torch.testing.assert_close(fn(q, k, v, is_causal=True).float(), expected, atol=2e-2, rtol=2e-2)
    grads = torch.autograd.grad(fn(q, k, v, is_causal=True).float().square().sum(), (q, k, v))
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    reference = torch.autograd.grad(eager_attention(qf, kf, vf, is_causal=True).square().sum(), (qf, kf, vf))
    for got, want in zip(grads, reference):
        torch.testing.assert_close(got.float(), want, atol=5e-2, rtol=5e-2)
    observed, ops = _attention_observed(fn, q, k, v, is_causal=True)
    assert observed == backend, sorted(ops)


def test_flash_attn_op_names_are_the_2_7_custom_ops(gpu_fakes):
    _, ops = _attention_observed(attention_function("flash_attn"), *_qkv())
    assert {"flash_attn::_flash_attn_forward", "flash_attn::_flash_attn_backward"} <= ops


def test_flash_attn_refuses_fp32_with_the_real_message(gpu_fakes):
    q = torch.randn(2, 8, 2, 16)
    with pytest.raises(RuntimeError, match=MESSAGES["flash_attn_dtype"][1]):
        gpu_fakes.flash_attn.flash_attn_func(q, q, q)


def test_xformers_bias_stride_rule_refuses_an_unaligned_16bit_bias(gpu_fakes):
    q = torch.randn(1, 5, 2, 16, dtype=torch.bfloat16)
    ops = deps.xformers_ops()
    aligned = torch.zeros(1, 2, 5, 8, dtype=torch.bfloat16)[:, :, :, :5]  # the hint xformers gives
    ops.memory_efficient_attention(q, q, q, attn_bias=aligned)
    with pytest.raises(NotImplementedError, match="No operator found for `memory_efficient_attention_forward`") as raised:
        ops.memory_efficient_attention(q, q, q, attn_bias=torch.zeros(1, 2, 5, 5, dtype=torch.bfloat16))
    verdict = match_known_failure(raised.value, Knobs(precision="bf16", attention="xformers"))
    assert dict(verdict.implicates) == {"attention": "xformers", "precision": "bf16"}


def test_xformers_profiles_as_fmha_not_as_sdpa(gpu_fakes):
    _, ops = _attention_observed(attention_function("xformers"), *_qkv())
    assert "_fMHA" in ops and not any("scaled_dot_product" in op for op in ops)


def test_apex_zero_grad_takes_no_argument_and_clear_grads_works(gpu_fakes):
    w = torch.nn.Parameter(torch.ones(4))
    opt = build_optimizer("apex", [w], lr=0.1, weight_decay=0.0)
    w.grad = torch.ones(4)
    with pytest.raises(TypeError) as raised:
        opt.zero_grad(set_to_none=True)
    assert match_known_failure(raised.value, Knobs(optimizer="apex")).implicates == (("optimizer", "apex"),)
    clear_grads(opt)
    assert w.grad is None


def test_apex_is_observed_on_a_later_step_that_shows_no_op(gpu_fakes):
    model = torch.nn.Linear(4, 2)
    opt = build_optimizer("apex", model.parameters(), lr=0.1, weight_decay=0.01)
    seen = []
    for _ in range(2):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(torch.ones(3, 4)).sum().backward()
            opt.step()
            clear_grads(opt)
        _, inside = ops_seen(prof, inside="Optimizer.step#")
        seen.append(inside)
        ev = StepEvidence(optimizer_ops=inside, optimizer_module=type(opt).__module__)
        assert observed_knobs(ev)["optimizer"] == "apex"
    assert seen[0] and not seen[1]  # aten ops on the first step only, as upstream


def _probe(knobs: Knobs):
    config = toy_config(knobs)
    return run_probe(create_workload(config.workload, config.workload_options), config, CPU)


@pytest.mark.parametrize(
    "knobs",
    [
        Knobs(precision="bf16", attention="flash_attn", optimizer="fused"),
        Knobs(precision="bf16", attention="xformers", optimizer="fused"),
        Knobs(precision="fp32", attention="xformers", optimizer="forloop"),
        Knobs(precision="fp32", attention="eager", optimizer="apex"),
    ],
    ids=str,
)
def test_probe_passes_and_observes_the_fake_backends(gpu_fakes, knobs):
    result = _probe(knobs)
    assert result.verdict.ok, result.verdict
    assert result.observed["attention"] == knobs.attention  # the probe does not step the optimizer


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_trial_trains_with_apex_and_flash_attn_and_records_what_ran(gpu_fakes, precision):
    """Through the executor: apex's zero_grad() at both call sites, its evidence from the class."""
    attention = "flash_attn" if precision == "bf16" else "xformers"
    knobs = Knobs(precision=precision, attention=attention, optimizer="apex")
    outcome = execute(toy_config(knobs, max_steps=3, eval_every=3), MemoryVerdicts())
    assert outcome.verdict.ok, outcome.verdict
    observed = outcome.attrs["knobs_observed"]
    assert (observed["attention"], observed["optimizer"]) == (attention, "apex")


def test_probe_blames_exactly_flash_attn_with_fp32(gpu_fakes):
    result = _probe(Knobs(precision="fp32", attention="flash_attn", optimizer="fused"))
    assert result.verdict.kind is Kind.INCOMPATIBLE
    assert dict(result.verdict.implicates) == {"attention": "flash_attn", "precision": "fp32"}


@pytest.mark.parametrize("s", [5, 8])
def test_xformers_takes_a_padding_mask_as_an_aligned_additive_bias(gpu_fakes, s):
    """A boolean mask has no finfo: xformers' alignment check would raise on it. hpo converts it."""
    q, k, v = _qkv(s=s)
    keep = torch.ones(2, 1, 1, s, dtype=torch.bool)
    keep[0, ..., -2:] = False  # the first sequence's last two tokens are padding
    got = attention_function("xformers")(q, k, v, attn_mask=keep)
    expected = eager_attention(*(t.float() for t in (q, k, v)), attn_mask=keep)
    torch.testing.assert_close(got.float(), expected, atol=2e-2, rtol=2e-2)
    with pytest.raises(TypeError):  # what the real alignment check does with a boolean tensor
        deps.xformers_ops().memory_efficient_attention(*(t.transpose(1, 2) for t in (q, k, v)), attn_bias=keep.expand(2, 2, s, s))
