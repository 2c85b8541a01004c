"""The evidence of a compiled step reads the ops that executed, never those Dynamo or AOTAutograd
recorded while tracing with fake tensors.

On the H200 (2026-11-26) a trial pinned to sdpa_flash was traced under its pin (fake flash ops in the
profile) and then ran a cached graph compiled for cuDNN attention: its evidence read
"sdpa_cudnn+sdpa_flash". Here a compile backend plays the cache: the graph is traced under the
trial's pin, sdpa_math, and executed under the flash kernel.
"""

from __future__ import annotations

import torch
from conftest import toy_config
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function

from hpo.config.trial import Knobs
from hpo.engine import AssembledModel
from hpo.evidence.capture import capture_step, ops_seen
from hpo.evidence.observe import observed_knobs
from hpo.torch_compat import COMPILE_PROFILER_RANGES
from hpo.workloads.catalog import create_workload

RUNS_FLASH = "hpo_test_traces_then_runs_flash"
MATH_OP = "aten::_scaled_dot_product_attention_math"
FLASH_OP = "aten::_scaled_dot_product_flash_attention_for_cpu"


def _runs_flash(gm: torch.fx.GraphModule, example_inputs):
    """Dynamo's graph calls F.scaled_dot_product_attention, which picks its kernel when it runs."""

    def run(*args):
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return gm(*args)

    return run


if RUNS_FLASH not in torch._dynamo.list_backends(exclude_tags=()):
    torch._dynamo.register_backend(_runs_flash, name=RUNS_FLASH)


def test_a_compiling_step_s_evidence_is_what_ran_not_what_was_traced():
    knobs = Knobs(precision="fp32", attention="sdpa_math", optimizer="forloop", compile="default")
    config = toy_config(knobs, compile_backend=RUNS_FLASH)
    assembled = AssembledModel(
        create_workload(config.workload, config.workload_options), knobs, config.training, torch.device("cpu")
    )
    batch = next(assembled.workload.train_batches(16, 0))
    with capture_step(assembled) as evidence:  # the first call: Dynamo traces inside the profile
        assembled.forward_backward(batch)
    assert assembled.graphs.graphs >= 1
    assert FLASH_OP in evidence.profiler_ops
    assert MATH_OP not in evidence.profiler_ops  # traced under the pin with fake tensors, never run
    assert observed_knobs(evidence)["attention"] == "sdpa_flash"


def test_torch_still_names_the_compile_ranges_the_evidence_leaves_out():
    """A contract with torch 2.13: Dynamo's trace runs inside the first range, the lazy backward
    compile inside the second. A rename lets trace-time ops back into the evidence."""
    model = torch.compile(torch.nn.Linear(8, 8), backend="aot_eager")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(torch.randn(2, 8)).sum().backward()
    names = {e.name() for e in prof.profiler.kineto_results.events()}
    assert set(COMPILE_PROFILER_RANGES) <= names


def test_ops_inside_a_compile_range_are_left_out_and_the_optimizer_s_still_counted():
    x = torch.ones(4, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(COMPILE_PROFILER_RANGES[0]):
            torch.sub(x, x)  # as if traced
        with record_function("Optimizer.step#AdamW.step"):
            torch.mul(x, x)
        torch.add(x, x)
    seen, inside = ops_seen(prof, inside="Optimizer.step#")
    assert "aten::sub" not in seen and COMPILE_PROFILER_RANGES[0] not in seen
    assert {"aten::add", "aten::mul"} <= seen and inside == {"aten::mul"}
