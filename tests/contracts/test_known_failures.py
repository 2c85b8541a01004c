"""Each upstream failure message implicates exactly the knob value, or (value, precision) pair, at
fault; anything else is not a knob verdict (None), and sticky CUDA errors are errors."""

from __future__ import annotations

import builtins

import pytest
import torch

from contracts.upstream import EXPECTED_IMPLICATES, MESSAGES, STICKY_MESSAGES
from hpo.config.trial import Knobs
from hpo.errors import KnobUnavailable
from hpo.verdicts import Kind
from hpo.verify.fault._known_failures import KNOWN_FAILURES, is_sticky_device_error, match_known_failure


def _raise(name: str) -> BaseException:
    type_name, message = MESSAGES[name]
    return getattr(builtins, type_name)(message)


def test_every_entry_has_an_upstream_fixture():
    assert {f.name for f in KNOWN_FAILURES} == set(MESSAGES) == set(EXPECTED_IMPLICATES)
    assert all(f.source for f in KNOWN_FAILURES)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_upstream_message_implicates_exactly_the_value_at_fault(name):
    knobs, implicated = EXPECTED_IMPLICATES[name]
    verdict = match_known_failure(_raise(name), Knobs(**knobs))
    assert verdict is not None and verdict.kind is Kind.INCOMPATIBLE
    assert list(verdict.implicates) == sorted(implicated)


def _fused_adamw_on_an_integer_param() -> None:
    param = torch.zeros(2, dtype=torch.int64)
    optimizer = torch.optim.AdamW([param], fused=True)
    param.grad = torch.zeros_like(param)
    optimizer.step()


def _efficient_sdpa_on_cpu() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.zeros(1, 1, 4, 8, dtype=torch.bfloat16)
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)


# The fixtures this torch can raise on CPU, raised for real rather than rebuilt from the fixture's text.
RAISED_BY_THIS_TORCH = {
    "torch_fused_optimizer_device": _fused_adamw_on_an_integer_param,
    "torch_fused_optimizer_flags": lambda: torch.optim.Adam([torch.zeros(2, requires_grad=True)], fused=True, foreach=True),
    "sdpa_cpu_no_viable_backend": _efficient_sdpa_on_cpu,
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # SDPA warns why each kernel was skipped before it raises
@pytest.mark.parametrize("name", sorted(RAISED_BY_THIS_TORCH))
def test_the_installed_torch_raises_the_fixture_verbatim_and_it_implicates_the_value_at_fault(name):
    with pytest.raises(RuntimeError) as caught:
        RAISED_BY_THIS_TORCH[name]()
    assert (type(caught.value).__name__, str(caught.value)) == MESSAGES[name]
    knobs, implicated = EXPECTED_IMPLICATES[name]
    verdict = match_known_failure(caught.value, Knobs(**knobs))
    assert verdict is not None and list(verdict.implicates) == sorted(implicated)


def test_fp32_refusal_of_sdpa_flash_never_bans_it_for_bf16():
    verdict = match_known_failure(_raise("sdpa_cuda_no_available_kernel"), Knobs(precision="fp32", attention="sdpa_flash"))
    assert dict(verdict.implicates) == {"attention": "sdpa_flash", "precision": "fp32"}
    assert ("precision", "bf16") not in verdict.implicates


def test_casing_of_upstream_messages_does_not_matter():
    exc = RuntimeError("FUSEDADAM only support fp16, bf16 and fp32.")
    assert match_known_failure(exc, Knobs(optimizer="apex")).implicates == (("optimizer", "apex"),)


def test_knob_unavailable_passes_through():
    exc = KnobUnavailable("attention=flash_attn needs the flash-attn package", [("attention", "flash_attn")])
    assert match_known_failure(exc, Knobs(attention="flash_attn")) is exc.verdict


def test_a_wrapped_failure_is_found_through_its_cause():
    try:
        try:
            raise _raise("flash_attn_dtype")
        except RuntimeError as inner:
            raise ValueError("model forward failed") from inner
    except ValueError as outer:
        verdict = match_known_failure(outer, Knobs(precision="fp32", attention="flash_attn"))
    assert dict(verdict.implicates) == {"attention": "flash_attn", "precision": "fp32"}


def test_dynamo_backend_failure_blames_compile_and_says_why():
    from torch._dynamo.exc import BackendCompilerFailed

    exc = BackendCompilerFailed(lambda gm, inputs: gm, RuntimeError("backend exploded"), None)
    verdict = match_known_failure(exc, Knobs(compile="max-autotune"))
    assert verdict.implicates == (("compile", "max-autotune"),)
    assert "backend exploded" in verdict.detail
    assert match_known_failure(exc, Knobs(compile=False)) is None  # compile was off: not its fault


def test_flex_attention_refusal_inside_dynamo_blames_compile():
    from torch._dynamo.exc import BackendCompilerFailed

    exc = BackendCompilerFailed(lambda gm, inputs: gm, _raise("flex_attention_cpu_backward"), None)
    assert match_known_failure(exc, Knobs(compile="default")).implicates == (("compile", "default"),)


@pytest.mark.parametrize(
    "exc",
    [
        KeyError("label"),
        ValueError("bad label"),
        AttributeError("module 'torch.nn.attention' has no attribute 'sdpa_kernel'"),  # an old torch
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (16x32 and 64x32)"),
        RuntimeError("index_add_(): self (Float) and source (BFloat16) must have the same scalar type"),
        NotImplementedError("my layer has no backward"),
        TypeError("forward() got an unexpected keyword argument 'attention_mask'"),
    ],
    ids=repr,
)
def test_user_bugs_are_not_knob_verdicts(exc):
    knobs = Knobs(precision="bf16", attention="flash_attn", optimizer="apex", compile="default")
    assert match_known_failure(exc, knobs) is None
    assert not is_sticky_device_error(exc)


@pytest.mark.parametrize("message", STICKY_MESSAGES)
def test_sticky_cuda_errors_are_errors_not_verdicts(message):
    exc = torch.AcceleratorError(message) if hasattr(torch, "AcceleratorError") else RuntimeError(message)
    assert is_sticky_device_error(exc)
    assert match_known_failure(exc, Knobs(precision="bf16", attention="sdpa_flash")) is None


def test_sticky_error_wrapped_by_a_refusal_like_message_is_still_sticky():
    try:
        try:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        except RuntimeError as inner:
            raise RuntimeError("No available kernel. Aborting execution.") from inner
    except RuntimeError as outer:
        assert is_sticky_device_error(outer)
        assert match_known_failure(outer, Knobs(attention="sdpa_flash")) is None


def test_this_torch_raises_the_cpu_refusal_the_table_knows():
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, 8, 16)
    with pytest.raises(RuntimeError) as raised, sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        F.scaled_dot_product_attention(q, q, q)
    verdict = match_known_failure(raised.value, Knobs(precision="bf16", attention="sdpa_efficient"))
    assert verdict.implicates == (("attention", "sdpa_efficient"),)


def test_this_torch_raises_the_fused_optimizer_refusal_the_table_knows():
    with pytest.raises(RuntimeError) as raised:
        torch.optim.AdamW([torch.nn.Parameter(torch.ones(2))], fused=True, foreach=True)
    assert match_known_failure(raised.value, Knobs(optimizer="fused")).implicates == (("optimizer", "fused"),)


def test_this_torch_refuses_a_mask_that_needs_gradients_in_the_cpu_flash_kernel_and_the_table_knows():
    """transformers' T5 passes its learned position bias as the attention mask: on a CPU, SDPA's
    flash kernel refuses it ("No available kernel.  Aborting execution.", two spaces), so
    attention=sdpa_flash cannot run that model, a contract and no differential guess."""
    import warnings

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, mask = torch.randn(1, 2, 8, 16), torch.zeros(1, 2, 8, 8, requires_grad=True)
    with pytest.raises(RuntimeError) as raised, sdpa_kernel([SDPBackend.FLASH_ATTENTION]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    verdict = match_known_failure(raised.value, Knobs(precision="fp32", attention="sdpa_flash"))
    assert verdict is not None and dict(verdict.implicates)["attention"] == "sdpa_flash"
