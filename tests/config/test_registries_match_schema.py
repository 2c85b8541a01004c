"""The knob registry is the one source: every allowed value has a spec, every spec is an allowed
value, and every name a spec gives (builder, package, probe, evidence) resolves to something real."""

import dataclasses

import pydantic
import pytest
import torch

from hpo import deps
from hpo.config.schema import ParallelSpec, SystemsSpec
from hpo.config.trial import ParallelSettings
from hpo.evidence.observe import StepEvidence, observed_knobs
from hpo.hardware import probes
from hpo.knobs.adamw_builders import OPTIMIZER_BUILDERS, build_optimizer
from hpo.knobs.attention_kernels import SDPA_KERNELS
from hpo.knobs.optimizer_impl import IMPLEMENTATION_FLAGS
from hpo.knobs.precision_plugins import DTYPES
from hpo.knobs.registry import (
    ATTENTION_SPECS,
    KNOB_NAMES,
    LOADER_KNOBS,
    LOADER_SPECS,
    OPTIMIZER_SPECS,
    PRECISION_SPECS,
    VALUE_SPECS,
    load,
)
from hpo.knobs.systems import KNOBS

ALL_SPECS = [spec for table in VALUE_SPECS.values() for spec in table.values()]
PRECISIONS, ATTENTIONS, OPTIMIZER_IMPLS = KNOBS["precision"].values, KNOBS["attention"].values, KNOBS["optimizer"].values
COMPILE_MODES, LOADERS = KNOBS["compile"].values[1:], KNOBS["loader"].values


def test_registry_keys_are_the_schema_values():
    # Every knob and loader setting in the registry is a key of the schema's `systems` section; the
    # other keys there choose how and where to run (compile backend, device) and are not searched;
    # `parallel` holds the ranks' keys, one per field of the trial's ParallelSettings.
    assert set(SystemsSpec.model_fields) == {*KNOB_NAMES, *LOADER_KNOBS, "compile_backend", "device", "parallel"}
    assert set(ParallelSpec.model_fields) == {f.name for f in dataclasses.fields(ParallelSettings)}
    assert set(LOADER_SPECS) == set(LOADERS)
    assert set(ATTENTION_SPECS) == set(ATTENTIONS)
    assert all(callable(load(spec.builder)) for spec in ATTENTION_SPECS.values())
    assert set(SDPA_KERNELS) == {a for a in ATTENTIONS if a.startswith("sdpa_")}
    assert set(OPTIMIZER_BUILDERS) == set(OPTIMIZER_IMPLS) == set(OPTIMIZER_SPECS)
    assert set(DTYPES) == set(PRECISIONS) == set(PRECISION_SPECS)
    assert {KNOBS["precision"].normalized(a) for spec in PRECISION_SPECS.values() for a in spec.aliases} <= set(PRECISIONS)


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda spec: spec.name)
def test_every_name_in_a_spec_resolves(spec):
    needs = getattr(spec, "needs", None)
    if hasattr(spec, "builder"):
        assert callable(load(spec.builder))
    if needs is not None and needs.package:
        assert needs.package in deps.OPTIONAL_PACKAGES
    if needs is not None and needs.probe:
        assert callable(getattr(probes, needs.probe))
    if hasattr(spec, "sdpa_kernel") and spec.sdpa_kernel:
        assert hasattr(torch.nn.attention.SDPBackend, spec.sdpa_kernel)


def test_precision_specs_name_real_dtypes_and_distinct_lightning_strings():
    assert {name: DTYPES[name] for name in PRECISIONS} == {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    assert len({spec.lightning for spec in PRECISION_SPECS.values()}) == len(PRECISION_SPECS)


@pytest.mark.parametrize("name", [n for n, spec in ATTENTION_SPECS.items() if spec.evidence_ops])
def test_each_attention_kernel_op_is_recognised_as_its_backend_alone(name):
    for fragment in ATTENTION_SPECS[name].evidence_ops:
        observed = observed_knobs(StepEvidence(profiler_ops={f"aten::{fragment}"}))
        assert observed["attention"] == name


@pytest.mark.parametrize("name", list(OPTIMIZER_SPECS))
def test_each_optimizer_path_is_recognised_by_its_evidence(name):
    evidence = OPTIMIZER_SPECS[name].evidence
    # Every optimizer step runs some plain tensor ops; a path's own evidence comes on top of them.
    ops = {"aten::mul_"} | {f"aten::{fragment}x" for fragment in evidence.ops} | set(evidence.except_ops)
    module = (evidence.module_prefix or "torch.optim.") + "adamw"
    assert observed_knobs(StepEvidence(optimizer_ops=ops, optimizer_module=module))["optimizer"] == name


@pytest.mark.parametrize("name", list(IMPLEMENTATION_FLAGS))
def test_each_torch_optimizer_path_is_built_with_its_flags(name):
    built = build_optimizer(name, [torch.nn.Parameter(torch.zeros(2))], lr=1e-3, weight_decay=0.0)
    assert type(built) is torch.optim.AdamW
    assert {flag: built.param_groups[0][flag] for flag in IMPLEMENTATION_FLAGS[name]} == IMPLEMENTATION_FLAGS[name]


@pytest.mark.parametrize(
    "knob,values",
    [("attention", ATTENTIONS), ("optimizer", OPTIMIZER_IMPLS), ("precision", PRECISIONS), ("compile", (False, *COMPILE_MODES))],
)
def test_schema_accepts_every_registry_value_and_nothing_else(knob, values):
    for value in values:
        assert SystemsSpec(**{knob: value}).choices()[knob] == [value]
    assert SystemsSpec(**{knob: list(values)}).choices()[knob] == list(values)
    with pytest.raises(pydantic.ValidationError, match=" or ".join(f"'{v}'" for v in values[-2:] if isinstance(v, str))):
        SystemsSpec(**{knob: "not-a-backend"})
