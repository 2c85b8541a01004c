"""Each systems knob changes what actually runs, shown by evidence from a real training step:
dtypes at the dispatcher, kernels in the profiler, recomputed forwards, saved activations, graphs."""

from __future__ import annotations

import pytest
import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.engine import AssembledModel
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import observed_knobs
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")


def one_step(knobs: Knobs, **options):
    config = toy_config(knobs, **options)
    torch.manual_seed(0)
    assembled = AssembledModel(create_workload(config.workload, config.workload_options), knobs, config.training, CPU)
    batch = next(assembled.workload.train_batches(16, 0))
    with capture_step(assembled) as evidence:
        assembled.forward_backward(batch)
        assembled.optimizer_step()
    return evidence, observed_knobs(evidence), assembled


@pytest.mark.parametrize("precision,dtype", [("fp32", "float32"), ("bf16", "bfloat16"), ("fp16", "float16")])
def test_precision_sets_the_dtype_reaching_matmul_kernels(precision, dtype):
    evidence, observed, assembled = one_step(Knobs(precision=precision, attention="sdpa", optimizer="fused"))
    assert set(evidence.matmul_dtypes) == {dtype}
    assert observed["precision"] == precision
    assert observed["grad_scaler"] == (precision == "fp16")
    assert (assembled.scaler is not None) == (precision == "fp16")


@pytest.mark.parametrize(
    "attention,kernel_op",
    [
        ("sdpa", "aten::_scaled_dot_product_flash_attention_for_cpu"),
        ("sdpa_flash", "aten::_scaled_dot_product_flash_attention_for_cpu"),
        ("sdpa_math", "aten::_scaled_dot_product_attention_math"),
    ],
)
def test_attention_backend_dispatches_its_kernel(attention, kernel_op):
    evidence, observed, _ = one_step(Knobs(attention=attention, optimizer="fused"))
    assert kernel_op in evidence.profiler_ops
    assert observed["attention"] == ("sdpa_flash" if attention == "sdpa" else attention)


def test_eager_attention_runs_no_sdpa_kernel():
    evidence, observed, _ = one_step(Knobs(attention="eager", optimizer="fused"))
    assert not any("scaled_dot_product" in op for op in evidence.profiler_ops)
    assert "aten::softmax" in evidence.profiler_ops
    assert observed["attention"] == "eager"


@pytest.mark.parametrize("attention", ["sdpa_efficient", "sdpa_cudnn"])
def test_pinned_sdpa_kernel_that_cannot_run_here_raises(attention):
    with pytest.raises(RuntimeError, match="No viable backend"):
        one_step(Knobs(attention=attention, optimizer="fused"))


@pytest.mark.parametrize(
    "impl,marker", [("forloop", None), ("foreach", "aten::_foreach_addcdiv_"), ("fused", "aten::_fused_adamw_")]
)
def test_optimizer_implementation_takes_its_path(impl, marker):
    evidence, observed, _ = one_step(Knobs(optimizer=impl))
    assert observed["optimizer"] == impl
    if marker:
        assert marker in evidence.optimizer_ops
    else:
        assert not any("_foreach_" in op or "_fused_" in op for op in evidence.optimizer_ops - {"aten::_foreach_add_"})


def _saved_bytes(knobs: Knobs) -> int:
    config = toy_config(knobs, n_blocks=4, d_model=64)
    assembled = AssembledModel(create_workload(config.workload, config.workload_options), knobs, config.training, CPU)
    batch = next(assembled.workload.train_batches(16, 0))
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        assembled.forward_backward(batch)
    return sum(saved)


def test_grad_checkpointing_recomputes_blocks_and_saves_fewer_activations():
    evidence, observed, assembled = one_step(Knobs(grad_checkpointing=True, optimizer="fused"), n_blocks=3)
    assert evidence.recompute_in_step == 3  # every block ran again during backward
    assert observed["grad_checkpointing"] is True
    evidence_off, observed_off, _ = one_step(Knobs(grad_checkpointing=False, optimizer="fused"), n_blocks=3)
    assert evidence_off.recompute_in_step == 0 and observed_off["grad_checkpointing"] is False
    on, off = _saved_bytes(Knobs(grad_checkpointing=True)), _saved_bytes(Knobs(grad_checkpointing=False))
    assert on < off / 2, (on, off)


def test_checkpointing_gives_the_same_gradients():
    grads = {}
    for flag in (False, True):
        _, _, assembled = one_step(Knobs(grad_checkpointing=flag, optimizer="forloop"))
        assembled.forward_backward(next(assembled.workload.train_batches(16, 1)))
        grads[flag] = torch.cat([p.grad.flatten() for p in assembled.model.parameters()])
    # The first step updated weights identically in both runs, so the second step's grads match too.
    torch.testing.assert_close(grads[True], grads[False])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_runs_compiled_graphs(backend):
    knobs = Knobs(compile="default", precision="bf16", attention="sdpa", optimizer="fused", grad_checkpointing=True)
    config = toy_config(knobs, compile_backend=backend)
    assembled = AssembledModel(create_workload(config.workload, config.workload_options), knobs, config.training, CPU)
    batch = next(assembled.workload.train_batches(16, 0))
    assembled.forward_backward(batch)  # compiles
    with capture_step(assembled) as evidence:
        assembled.forward_backward(batch)
        assembled.optimizer_step()
    observed = observed_knobs(evidence)
    assert assembled.graphs.graphs >= 1 and assembled.graphs.nodes > 0
    assert observed["compile"] is True
    assert observed["precision"] == "bf16"  # dtypes read from the compiled graph itself
    assert observed["grad_checkpointing"] is True and assembled.graphs.checkpoint_regions == 2
    uncompiled, _, _ = one_step(Knobs(optimizer="fused"))
    assert uncompiled.graphs.graphs == 0
