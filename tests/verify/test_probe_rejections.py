"""The pre-trial probe rejects each kind of broken knob combination with a specific reason,
on real models, and passes the combinations that work."""

from __future__ import annotations

import pytest
import torch
from conftest import judged_despite_noise, toy_config

from hpo.config.trial import Knobs
from hpo.verdicts import Kind
from hpo.verify.probing import run_probe
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")


def probe(knobs: Knobs, *, skip_slow: bool = False, slow_ratio: float = 5.0, compile_backend="eager", **options):
    config = toy_config(knobs, compile_backend=compile_backend, **options)
    config = type(config)(**{**config.__dict__, "skip_slow": skip_slow, "slow_ratio": slow_ratio})
    return run_probe(create_workload(config.workload, config.workload_options), config, CPU)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_activations_beyond_fp16_range_pass_in_fp32_and_bf16(precision):
    result = probe(Knobs(precision=precision, attention="sdpa", optimizer="fused"), overflow=1e5)
    assert str(result.verdict) == "ok", result
    assert result.loss_rel_err is not None and result.grad_rel_err is not None


def test_activations_beyond_fp16_range_are_rejected_in_fp16():
    result = probe(Knobs(precision="fp16", attention="sdpa", optimizer="fused"), overflow=1e5)
    assert str(result.verdict).startswith("incompatible: non-finite"), str(result.verdict)
    assert "fp16" in str(result.verdict)


def test_gradients_that_overflow_fp16_at_any_scale_are_rejected():
    result = probe(Knobs(precision="fp16", attention="eager", optimizer="fused"), loss_scale=1e30)
    assert str(result.verdict).startswith("incompatible: non-finite gradients under fp16 (overflow)"), str(result.verdict)
    # fused AdamW alone passes: the differential run implicates only the precision
    assert result.verdict.implicates == (("precision", "fp16"),) and result.blame == "differential"


def test_unavailable_sdpa_kernel_is_rejected_with_the_kernel_named():
    result = probe(Knobs(attention="sdpa_efficient", optimizer="fused"))
    assert str(result.verdict).startswith("incompatible: attention=sdpa_efficient: No viable backend"), str(result.verdict)


@pytest.mark.parametrize("attention", ["flash_attn", "xformers"])
def test_missing_attention_package_is_rejected(attention):
    result = probe(Knobs(attention=attention, precision="bf16", optimizer="fused"))
    assert str(result.verdict).startswith(f"incompatible: attention={attention} needs the"), str(result.verdict)


def test_missing_nvidia_apex_is_rejected():
    result = probe(Knobs(optimizer="apex"))
    assert "NVIDIA apex" in str(result.verdict) and str(result.verdict).startswith("incompatible:")


def test_compile_error_is_rejected():
    @torch._dynamo.register_backend(name="hpo_test_broken_backend")
    def broken(gm, example_inputs):
        raise RuntimeError("backend exploded")

    result = probe(Knobs(compile="default", optimizer="fused"), compile_backend="hpo_test_broken_backend")
    assert str(result.verdict).startswith("incompatible: compile=default:"), str(result.verdict)
    assert "backend exploded" in str(result.verdict)


def test_dtype_mismatch_reaching_a_kernel_is_blamed_on_the_precision_by_a_differential_run():
    """index_add_ meets a bf16 source and an fp32 target: torch's message names dtypes, but no upstream
    contract says which knob is at fault; the differential run does (sdpa and fused pass alone)."""
    assert str(probe(Knobs(precision="fp32", optimizer="fused"), index_add_residual=True).verdict) == "ok"
    result = probe(Knobs(precision="bf16", optimizer="fused"), index_add_residual=True)
    assert str(result.verdict).startswith("incompatible: RuntimeError: "), str(result.verdict)
    assert "fails with precision=bf16; passes with fp32/eager/for-loop" in str(result.verdict)
    assert result.verdict.implicates == (("precision", "bf16"),) and result.blame == "differential"


def test_a_knob_that_ran_otherwise_is_rejected(monkeypatch):
    import contextlib

    from hpo.knobs.precision_plugins import MixedPrecision

    monkeypatch.setattr(MixedPrecision, "forward_context", lambda self: contextlib.nullcontext())
    result = probe(Knobs(precision="bf16", optimizer="fused"))
    assert str(result.verdict) == "incompatible: ran other than asked: precision: asked bf16, ran fp32"


@pytest.mark.slow
def test_a_precision_this_cpu_emulates_is_slow_from_the_machine_fact(tmp_path, monkeypatch):
    """fp16 matmuls on a CPU without fp16 units run one to two orders of magnitude slower: proven
    once for the machine (`hpo.verify.timing._emulated`), and the probe rejects fp16 for any model from it."""
    if torch.ops.mkldnn._is_mkldnn_fp16_supported():
        pytest.skip("this CPU has native fp16 matmuls")
    monkeypatch.setenv("HPO_MACHINE_FACTS", str(tmp_path))
    result = probe(Knobs(precision="fp16", attention="eager", optimizer="fused"), skip_slow=True, slow_ratio=3.0)
    assert result.verdict.kind is Kind.SLOW and result.blame == "machine fact", result
    assert result.verdict.detail.startswith("emulated on this CPU (fp16 matmul ") and result.verdict.implicates == (
        ("precision", "fp16"),
    )


def test_working_but_much_slower_combination_is_flagged_with_its_ratio(monkeypatch):
    """With no machine fact that settles it (a stored ratio under the threshold), the per-model
    proof times fp16 beside fp32: one to two orders of magnitude slower on a CPU without fp16 units."""
    monkeypatch.setattr("hpo.verify.probing._probe.emulated_slow", lambda *args: None)
    knobs = Knobs(precision="fp16", attention="eager", optimizer="fused")
    result = judged_despite_noise(lambda: probe(knobs, skip_slow=True, slow_ratio=3.0, d_model=384, seq_len=64, n_blocks=1))
    if torch.ops.mkldnn._is_mkldnn_fp16_supported():
        pytest.skip("this CPU has native fp16 matmuls")
    assert result.ok and str(result.slow).startswith("slow: "), result
    assert result.slowdown > 3.0
    # Timed one value at a time, fused AdamW is not slow: only fp16, at this batch size, is blamed.
    assert result.slow.implicates == (("batch_size", 16), ("precision", "fp16")), result.slow
    kept = probe(knobs, skip_slow=False, d_model=384, seq_len=64, n_blocks=1)
    assert str(kept.verdict) == "ok" and kept.slow is None and kept.slowdown > 1.0  # measured and recorded, not skipped


def test_the_finite_check_of_gradients_is_exact_where_a_norm_would_overflow():
    from hpo.verify.probing._compared_step import _all_finite

    huge = [torch.full((4,), 3e38), torch.ones(3)]  # finite, though their norm overflows fp32
    assert torch.isinf(torch.linalg.vector_norm(huge[0]))
    assert _all_finite(huge)
    assert not _all_finite([torch.ones(3), torch.tensor([1.0, float("nan")])])
    assert not _all_finite([torch.tensor([float("-inf")]), torch.ones(2)])
