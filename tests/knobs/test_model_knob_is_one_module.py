"""A model knob is one module. `extra_knobs/forward_marker.py`, a knob that exists only here, declares
itself and its hook in a single module; registered through hpo's own discovery (`knobs_in`), it is
applied by an `AssembledModel`, observed and compared, and nothing in the engine names it. A knob
asked for but applied by nothing is caught as a mismatch."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpo.knobs.knob import knobs_in
from hpo.knobs.systems import KNOBS, TRIAL_KNOBS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def scenario() -> dict:
    """Run in a fresh interpreter after `extra_knobs.register()`: one profiled step with the marker
    on, one with it off, and one with it asked for while nothing applies it (its hook removed)."""
    from extra_knobs import forward_marker

    results = {"on": _profiled_step(True), "off": _profiled_step(False)}
    type(forward_marker.KNOB).hook = None  # still declared, asked for and observed; applied by nothing
    results["unapplied"] = _profiled_step(True)
    return results


def _profiled_step(marker: bool) -> dict:
    import torch
    from conftest import toy_config
    from extra_knobs import forward_marker

    from hpo.config.trial import Knobs
    from hpo.engine import AssembledModel
    from hpo.evidence.capture import capture_step
    from hpo.evidence.observe import mismatches, observed_knobs
    from hpo.workloads.catalog import create_workload

    knobs = Knobs(precision="fp32", attention="eager", optimizer="forloop", forward_marker=marker)
    config = toy_config(knobs)
    torch.manual_seed(0)
    workload = create_workload(config.workload, config.workload_options)
    assembled = AssembledModel(workload, knobs, config.training, torch.device("cpu"))
    before = forward_marker.HOOK.forwards
    with capture_step(assembled) as evidence:
        assembled.forward_backward(next(workload.train_batches(16, 0)))
        assembled.optimizer_step()
    observed = observed_knobs(evidence)
    return {
        "forward_model": type(assembled.forward_model).__name__,
        "marked_forwards": forward_marker.HOOK.forwards - before,
        "mark_in_profiler": forward_marker.MARK in evidence.profiler_ops,
        "observed": observed["forward_marker"],
        "mismatches": [str(m) for m in mismatches(knobs, observed)],
    }


@pytest.fixture(scope="module")
def ran() -> dict:
    code = (
        "import json, extra_knobs; extra_knobs.register(); "
        "import test_model_knob_is_one_module as t; print(json.dumps(t.scenario()))"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT / "tests"), str(ROOT)]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_new_model_knob_is_applied_and_observed_from_its_module_alone(ran):
    on = ran["on"]
    assert on["forward_model"] == "Marked" and on["marked_forwards"] == 1 and on["mark_in_profiler"]
    assert on["observed"] is True and on["mismatches"] == []


def test_off_the_new_knob_leaves_the_step_as_it_was(ran):
    off = ran["off"]
    assert off["forward_model"] != "Marked" and off["marked_forwards"] == 0 and not off["mark_in_profiler"]
    assert off["observed"] is False and off["mismatches"] == []


def test_a_knob_asked_for_but_applied_by_nothing_is_a_mismatch(ran):
    unapplied = ran["unapplied"]
    assert unapplied["marked_forwards"] == 0 and not unapplied["mark_in_profiler"]
    assert unapplied["mismatches"] == ["forward_marker: asked True, ran False"]


def test_hpo_discovery_never_finds_the_test_knob():
    import hpo.knobs.systems as systems

    assert "forward_marker" not in KNOBS
    assert "forward_marker" not in knobs_in(systems.__name__, systems.__path__)


def test_the_engine_names_no_trial_knob():
    """What the knobs' hooks replaced: `knobs.<name>` or a knob's name as a string in the engine."""
    tree = ast.parse((ROOT / "hpo/engine/_assembly.py").read_text())
    named = [
        node.attr if isinstance(node, ast.Attribute) else node.value
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr in TRIAL_KNOBS and _is_knobs(node.value))
        or (isinstance(node, ast.Constant) and node.value in TRIAL_KNOBS)
    ]
    assert named == []


def _is_knobs(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "knobs") or (isinstance(node, ast.Name) and node.id == "knobs")
