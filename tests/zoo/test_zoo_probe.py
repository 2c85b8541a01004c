"""Every zoo model against every knob value this CPU can run, one value at a time against the
fp32/eager/for-loop reference, through hpo's probe as `hpo probe` runs it: each gives `ok` or an
honest refusal, proven by a known upstream refusal (`contract`) or by evidence of what ran
(`evidence`). A verdict a differential run had to find (a difference from fp32, an exception no
known refusal explains) on a model hpo did not write is what this test exists to catch."""

from __future__ import annotations

import pytest
import torch
from host_kernels import HOST_KERNEL_FAULTS

from examples.zoo.matrix import ProbeRow, knob_values, probe_model, runnable_here
from examples.zoo.models import ZOO
from examples.zoo.table import COMPILED

pytestmark = pytest.mark.slow

CPU = torch.device("cpu")
HONEST_REFUSALS = ("contract", "evidence")


def _not_honest(rows: list[ProbeRow], wrong_kernel: tuple[str, object] | None = None) -> list[str]:
    return [
        f"{r.knob}={r.value}: {r.verdict} [blame {r.blame}]"
        for r in rows
        if not r.ok and r.blame not in HONEST_REFUSALS and (r.knob, r.value) != wrong_kernel
    ]


def _host_fault(name: str) -> tuple[str, object] | None:
    """The value this host's wrong kernel serves on model `name` (tests/zoo/host_kernels.py), if any."""
    if name not in HOST_KERNEL_FAULTS:
        return None
    knob, value, is_wrong = HOST_KERNEL_FAULTS[name]
    return (knob, value) if is_wrong() else None


@pytest.mark.parametrize("name", list(ZOO))
def test_every_runnable_knob_value_is_ok_or_honestly_refused(name):
    values, _ = runnable_here(knob_values(compile_modes=()), CPU)
    rows = list(probe_model(ZOO[name], values, CPU))
    assert [(r.knob, r.value) for r in rows] == values
    wrong_kernel = _host_fault(name)
    assert _not_honest(rows, wrong_kernel) == []
    if wrong_kernel is not None:  # the kernel is wrong here: hpo must say so, blaming that value alone
        (row,) = [r for r in rows if (r.knob, r.value) == wrong_kernel]
        assert row.verdict.startswith("incompatible: gradients differ") and row.blame == "differential", row
        assert f"fails with {wrong_kernel[0]}={wrong_kernel[1]}" in row.verdict, row
    for r in rows:  # a passing value was compared with the reference: its errors are measured
        assert not r.ok or (r.loss_rel_err is not None and r.grad_rel_err is not None), r


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_models_are_ok_or_honestly_refused(name):
    """torch.compile with inductor, on the representative subset CI pays for (docs/zoo.md)."""
    rows = list(probe_model(ZOO[name], [("compile", "default")], CPU))
    assert _not_honest(rows) == []
    assert rows[0].ok and rows[0].observed["compiled_graphs"] > 0, rows[0]  # compiled graphs ran the step
