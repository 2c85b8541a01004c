"""Every zoo model against every knob value this CPU can run, one value at a time against the
fp32/eager/for-loop reference, through hpo's probe as `hpo probe` runs it: each gives `ok` or an
honest refusal, proven by a known upstream refusal (`contract`) or by evidence of what ran
(`evidence`). A verdict a differential run had to find (a difference from fp32, an exception no
known refusal explains) on a model hpo did not write is what this test exists to catch."""

from __future__ import annotations

import pytest
import torch

from examples.zoo.matrix import ProbeRow, knob_values, probe_model, runnable_here
from examples.zoo.models import ZOO
from examples.zoo.table import COMPILED

pytestmark = pytest.mark.slow

CPU = torch.device("cpu")
HONEST_REFUSALS = ("contract", "evidence")


def _not_honest(rows: list[ProbeRow]) -> list[str]:
    return [f"{r.knob}={r.value}: {r.verdict} [blame {r.blame}]" for r in rows if not r.ok and r.blame not in HONEST_REFUSALS]


@pytest.mark.parametrize("name", list(ZOO))
def test_every_runnable_knob_value_is_ok_or_honestly_refused(name):
    values, _ = runnable_here(knob_values(compile_modes=()), CPU)
    rows = list(probe_model(ZOO[name], values, CPU))
    assert [(r.knob, r.value) for r in rows] == values
    assert _not_honest(rows) == []
    for r in rows:  # a passing value was compared with the reference: its errors are measured
        assert not r.ok or (r.loss_rel_err is not None and r.grad_rel_err is not None), r


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_models_are_ok_or_honestly_refused(name):
    """torch.compile with inductor, on the representative subset CI pays for (docs/zoo.md)."""
    rows = list(probe_model(ZOO[name], [("compile", "default")], CPU))
    assert _not_honest(rows) == []
    assert rows[0].ok and rows[0].observed["compiled_graphs"] > 0, rows[0]  # compiled graphs ran the step
