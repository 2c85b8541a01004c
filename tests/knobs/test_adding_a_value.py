"""Adding a knob value is one edit: one more spec in `hpo.knobs.registry`. A FlexAttention-like
backend with its own kernel op is added to the registry and nothing else, and the schema, `hpo
doctor`, the attention builder, a real training step and the observation of what ran all take it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import toy_config

from hpo.app import doctor
from hpo.config.trial import Knobs
from hpo.engine import AssembledModel
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import mismatches, observed_knobs
from hpo.hardware import probes
from hpo.knobs import registry
from hpo.knobs.attention_kernels import attention_function, eager_attention
from hpo.workloads.catalog import create_workload

ROOT = Path(__file__).resolve().parents[2]
FLEX_OP = "flex_attention_forward"  # the kernel op a FlexAttention-like backend would show


def flex_like_attention(q, k, v, **kwargs):
    """Eager attention inside a named profiler range: a backend whose kernel has its own op name."""
    with torch.profiler.record_function(FLEX_OP):
        return eager_attention(q, k, v, **kwargs)


FLEX = registry.AttentionSpec(
    name="flex",
    builder=f"{__name__}:flex_like_attention",
    evidence_ops=(FLEX_OP,),
    needs=registry.Needs(probe="flex_attention_runs"),
)


@pytest.fixture
def flex_registered(monkeypatch):
    """The one edit: the spec is in the registry. The probe it names is faked here, as probes are."""
    monkeypatch.setitem(registry.ATTENTION_SPECS, "flex", FLEX)
    why = "flex_attention needs torch.compile on this device"
    monkeypatch.setattr(probes, "flex_attention_runs", lambda device: probes.Capability(False, why), raising=False)
    return why


def test_the_schema_allows_a_value_once_its_spec_is_in_the_registry():
    # The schema's Literals are built when it is imported, so the edit is made first, in a fresh
    # interpreter, as editing registry.py would; torch stays unimported all the while.
    script = """
import json, sys
from hpo.knobs import registry
registry.ATTENTION_SPECS["flex"] = registry.AttentionSpec(name="flex", builder="m:f", evidence_ops=("x",))
from hpo.config.schema import SystemsSpec
from hpo.knobs.systems import KNOBS
print(json.dumps([list(KNOBS["attention"].values), SystemsSpec(attention=["flex", "sdpa"]).choices()["attention"], "torch" in sys.modules]))
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    allowed, chosen, torch_imported = json.loads(done.stdout)
    assert allowed[-1] == "flex" and chosen == ["flex", "sdpa"] and not torch_imported


def test_doctor_reports_the_new_value_from_its_probe(flex_registered):
    report = doctor.capability_report(torch.device("cpu"))
    assert report["attention"]["flex"] == {"usable": False, "why": flex_registered}
    assert f"  flex                no   {flex_registered}" in doctor.format_report(report).splitlines()


def test_a_real_step_runs_the_new_backend_and_is_recognised(flex_registered):
    assert attention_function("flex") is flex_like_attention
    knobs = Knobs(precision="fp32", attention="flex", optimizer="forloop")
    config = toy_config(knobs)
    torch.manual_seed(0)
    assembled = AssembledModel(
        create_workload(config.workload, config.workload_options), knobs, config.training, torch.device("cpu")
    )
    with capture_step(assembled) as evidence:
        assembled.forward_backward(next(assembled.workload.train_batches(16, 0)))
        assembled.optimizer_step()
    observed = observed_knobs(evidence)
    assert FLEX_OP in evidence.profiler_ops and observed["attention"] == "flex"
    assert mismatches(knobs, observed) == []
    asked_sdpa = Knobs(precision="fp32", attention="sdpa", optimizer="forloop")
    assert [str(m) for m in mismatches(asked_sdpa, observed)] == ["attention: asked sdpa, ran flex"]


BF16_ALT = registry.PrecisionSpec(
    name="bf16_alt", dtype="bfloat16", mantissa_bits=7, autocast=True, lightning="bf16-mixed", trainer_flag="bf16"
)


def test_a_new_precision_is_one_spec_too(monkeypatch):
    """A precision added to the registry alone: its autocast dtype reaches the matmul, its mantissa
    sets the probe's bound, and the MFU peak times it, with no other table to edit."""
    from hpo.hardware import _peaks as peaks
    from hpo.knobs.precision_plugins import precision_plugin
    from hpo.verify.probing._bounds import Errors, bound_from_floor

    monkeypatch.setitem(registry.PRECISION_SPECS, "bf16_alt", BF16_ALT)
    plugin = precision_plugin("bf16_alt", "cpu")
    with plugin.forward_context():
        out = torch.nn.Linear(8, 8)(torch.randn(2, 8))
    assert out.dtype == torch.bfloat16 and plugin.scaler is None
    assert bound_from_floor("bf16_alt", Errors(0.0, 0.0)).bound.grad == 8 * 2**-8
    assert peaks._shortest_product("bf16_alt", 64, repeats=1) > 0
