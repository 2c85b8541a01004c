"""Fed the op names an H100 step produces for each attention backend and optimizer path (as read
from upstream, tests/contracts/upstream.py), hpo's evidence recognises each as exactly itself."""

from __future__ import annotations

import itertools

import pytest

from contracts.upstream import (
    ATTENTION_OPS,
    FLASH_ATTN_2_6_OPS,
    LOSS_OPS,
    OPTIMIZER_MODULES,
    OPTIMIZER_OPS,
    XFORMERS_FA3_OPS,
)
from hpo.config.trial import Knobs
from hpo.evidence.observe import StepEvidence, mismatches, observed_knobs
from hpo.knobs.compiled_graphs import GraphRecord
from hpo.knobs.registry import ATTENTION_SPECS, OPTIMIZER_SPECS
from hpo.knobs.systems.attention import _matches as _attention_matches

# Backends with a fixture of their own ("sdpa" is any of the pinned SDPA kernels).
FIXTURES = {**ATTENTION_OPS, "xformers_fa3": XFORMERS_FA3_OPS}
BACKEND_OF = {name: name for name in ATTENTION_OPS} | {"xformers_fa3": "xformers"}


def _observed_attention(ops) -> str | None:
    return observed_knobs(StepEvidence(profiler_ops=set(ops) | LOSS_OPS))["attention"]


def test_every_attention_value_has_a_fixture():
    assert set(ATTENTION_SPECS) - {"sdpa"} == set(ATTENTION_OPS)


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_each_backend_reads_as_exactly_itself(fixture):
    assert _observed_attention(FIXTURES[fixture]) == BACKEND_OF[fixture]


# Every ordered pair of fixtures of different backends (xformers' two paths are one backend).
OTHER_BACKEND_PAIRS = [(a, b) for a, b in itertools.permutations(sorted(FIXTURES), 2) if BACKEND_OF[a] != BACKEND_OF[b]]


@pytest.mark.parametrize(("mine", "theirs"), OTHER_BACKEND_PAIRS)
def test_no_fragment_of_one_backend_matches_another_backends_ops(mine, theirs):
    ops = FIXTURES[theirs] | LOSS_OPS
    hits = [(frag, op) for frag in ATTENTION_SPECS[BACKEND_OF[mine]].evidence_ops for op in ops if frag in op]
    assert not hits


def test_eagers_exact_softmax_ops_are_shadowed_by_any_kernel():
    """SDPA's math kernel calls aten::softmax too (attention.cpp): eager's ops prove it only when no
    kernel's fragment matched, which the exact-recognition test above checks for every fixture."""
    eager = set(ATTENTION_SPECS["eager"].fallback_ops)
    assert eager and eager <= ATTENTION_OPS["eager"]
    assert not eager & LOSS_OPS  # the loss's log_softmax is not eager attention


def test_the_loss_alone_is_not_eager():
    assert _observed_attention(set()) is None


def test_an_unrecognised_kernel_is_not_observed_not_eager():
    assert _observed_attention(FLASH_ATTN_2_6_OPS) is None


@pytest.mark.parametrize("kernel", ["sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math"])
def test_sdpa_is_proven_by_any_pinnable_kernel(kernel):
    ran = _observed_attention(ATTENTION_OPS[kernel])
    assert ran == kernel and _attention_matches("sdpa", ran)
    assert not _attention_matches("xformers", ran)


def test_fp32_sdpa_picking_the_efficient_kernel_is_no_mismatch():
    """The default study (fp32/sdpa/fused) on an H100: SDPA picks its efficient kernel for fp32."""
    ev = StepEvidence(
        profiler_ops=ATTENTION_OPS["sdpa_efficient"] | LOSS_OPS,
        optimizer_ops=OPTIMIZER_OPS["fused"]["first"],
        optimizer_module=OPTIMIZER_MODULES["fused"],
    )
    observed = observed_knobs(ev)
    assert observed["attention"] == "sdpa_efficient" and observed["optimizer"] == "fused"
    found = mismatches(Knobs(precision="fp32", attention="sdpa", optimizer="fused"), observed)
    assert [m.knob for m in found if m.knob in ("attention", "optimizer")] == []


def test_compiled_graph_with_softmax_reads_as_eager():
    graphs = GraphRecord()
    graphs.graphs, graphs.softmax_nodes = 1, 2
    assert observed_knobs(StepEvidence(graphs=graphs))["attention"] == "eager"


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZER_OPS))
@pytest.mark.parametrize("step", ["first", "later"])
def test_each_optimizer_path_reads_as_itself_on_every_step(optimizer, step):
    ev = StepEvidence(optimizer_ops=OPTIMIZER_OPS[optimizer][step], optimizer_module=OPTIMIZER_MODULES[optimizer])
    assert observed_knobs(ev)["optimizer"] == optimizer


def test_every_optimizer_value_has_a_fixture():
    assert set(OPTIMIZER_SPECS) == set(OPTIMIZER_OPS)


def test_torch_optimizer_out_of_view_is_not_observed():
    ev = StepEvidence(optimizer_ops=set(), optimizer_module="torch.optim.adamw")
    assert observed_knobs(ev)["optimizer"] is None
