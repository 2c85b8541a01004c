"""A refusal under torch.compile earns the same verdict, with the same message, as without it.

Dynamo traces the model with fake tensors; an op that refuses there (a pinned SDPA kernel that cannot
run) surfaces as TorchRuntimeError "RuntimeError when making fake tensor call", with the op's own
error behind it. On the H200 (2026-11-26) fp32 + sdpa_flash under compile was recorded with that
first line instead of "No available kernel. Aborting execution.".
"""

from __future__ import annotations

import builtins

import pytest
import torch
import torch.nn.functional as F
from conftest import toy_config
from torch._dynamo.exc import unimplemented
from torch._dynamo.utils import _wrap_graph_break_with_torch_runtime_err
from torch.nn.attention import SDPBackend, sdpa_kernel

from contracts.upstream import MESSAGES
from hpo.config.trial import Knobs
from hpo.errors import error_verdict, real_cause
from hpo.verify.fault import match_known_failure
from hpo.verify.probing import run_probe
from hpo.workloads.catalog import create_workload


def _refused_while_traced(cause: BaseException) -> BaseException:
    """The exception Dynamo raises when `cause` comes out of an op traced with fake tensors, built
    by torch's own functions as `_get_fake_value_impl` calls them (torch/_dynamo/utils.py, 2.13)."""
    wrapped = RuntimeError(f"Dynamo failed to run FX node with fake tensors: got {cause!r}")
    wrapped.__cause__ = cause
    with pytest.raises(RuntimeError) as raised:
        _wrap_graph_break_with_torch_runtime_err(
            lambda: unimplemented(
                gb_type="RuntimeError when making fake tensor call",
                context="",
                explanation=str(wrapped),
                hints=[],
                from_exc=cause,
            )
        )
    return raised.value


class TorchDynamoException(RuntimeError):  # torch/_dynamo/exc.py's names: hpo matches them by name
    pass


class ObservedException(TorchDynamoException):
    pass


class ObservedRuntimeError(ObservedException):
    pass


class FakeTensorObservedException(ObservedException):
    pass


class TorchRuntimeError(TorchDynamoException):
    pass


def _refused_while_traced_as_torch_2_14(cause: BaseException) -> BaseException:
    """The chain torch 2.14.1 raises when `cause` comes out of an op traced with fake tensors, raised
    as its `run_node` and `get_fake_value` (torch/_dynamo/utils.py) and `exception_handler`
    (symbolic_convert.py) raise it; torch 2.13 has no FakeTensorObservedException to build it with."""
    try:
        try:
            try:
                raise cause
            except Exception as e:
                raise RuntimeError(
                    f"Dynamo failed to run FX node with fake tensors: call_function sdpa(*(), **{{}}): got {e!r}"
                ) from e
        except RuntimeError as e:
            try:
                raise ObservedRuntimeError(str(e))
            except ObservedException:
                raise FakeTensorObservedException(str(e)) from None
    except FakeTensorObservedException as observed:
        return _raised_from_none(
            TorchRuntimeError(f"RuntimeError when making fake tensor call\n  Explanation: {observed}"), observed
        )


def _raised_from_none(wrapper: BaseException, handled: BaseException) -> BaseException:
    try:
        raise handled
    except type(handled):
        try:
            raise wrapper from None
        except type(wrapper) as raised:
            return raised


AS_TORCH_RAISES = pytest.mark.parametrize(
    "traced_by", [_refused_while_traced, _refused_while_traced_as_torch_2_14], ids=["2.13", "2.14"]
)


def _attention(q):
    return F.scaled_dot_product_attention(q, q, q, is_causal=True)


def _raised(fn, *args) -> BaseException:
    with pytest.raises(RuntimeError) as raised, sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):  # none on CPU
        fn(*args)
    return raised.value


def test_the_cpu_refusal_under_compile_is_the_same_verdict_as_without():
    knobs = Knobs(attention="sdpa_efficient", compile="default")
    q = torch.randn(2, 2, 8, 16, requires_grad=True)
    traced = _raised(torch.compile(_attention, backend="eager"), q)
    assert type(traced).__name__ == "TorchRuntimeError"  # Dynamo's wrapper, as torch raises it
    eager = match_known_failure(_raised(_attention, q), knobs)
    assert eager is not None and match_known_failure(traced, knobs) == eager
    assert "No viable backend" in str(eager) and "fake tensor" not in str(eager)


@AS_TORCH_RAISES
def test_the_cuda_refusal_under_compile_blames_the_kernel_with_the_precision_and_says_why(traced_by):
    type_name, message = MESSAGES["sdpa_cuda_no_available_kernel"]
    knobs = Knobs(precision="fp32", attention="sdpa_flash", compile="default")
    traced = traced_by(getattr(builtins, type_name)(message))
    verdict = match_known_failure(traced, knobs)
    assert verdict == match_known_failure(getattr(builtins, type_name)(message), knobs)
    assert verdict.detail == "attention=sdpa_flash: No available kernel. Aborting execution."
    assert dict(verdict.implicates) == {"attention": "sdpa_flash", "precision": "fp32"}
    assert str(real_cause(traced)) == message


@AS_TORCH_RAISES
def test_an_unknown_error_while_traced_is_neither_a_known_refusal_nor_compile_s_fault(traced_by):
    """Dynamo only traced the op that failed: a differential run must find who is at fault."""
    traced = traced_by(RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"))
    assert match_known_failure(traced, Knobs(compile="default")) is None
    assert str(real_cause(traced)).startswith("mat1 and mat2 shapes")
    # The trial's error names the op's error, not the first line of Dynamo's wrapper.
    assert str(error_verdict(traced)) == "error: RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"


def test_the_probe_rejects_a_pinned_kernel_under_compile_as_it_does_without():
    def probe(knobs: Knobs):
        config = toy_config(knobs, compile_backend="eager")
        return run_probe(create_workload(config.workload, config.workload_options), config, torch.device("cpu"))

    compiled = probe(Knobs(attention="sdpa_efficient", optimizer="fused", compile="default"))
    plain = probe(Knobs(attention="sdpa_efficient", optimizer="fused"))
    assert compiled.verdict == plain.verdict, (compiled.verdict, plain.verdict)
    assert str(compiled.verdict).startswith("incompatible: attention=sdpa_efficient: No viable backend")
