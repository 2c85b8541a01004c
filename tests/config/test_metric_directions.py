"""A metric's direction is declared by the workload (or known, for a systems metric), never guessed
from its name; an objective or target on a metric of unknown direction is refused at the boundary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpo.config.resolve import representative_config
from hpo.config.space import parse_space
from hpo.errors import UserInputError
from hpo.workloads.catalog import BUILTIN_WORKLOADS, metrics_of

ROOT = Path(__file__).resolve().parents[2]


def _space(workload: str, objectives=("val_loss",), directions=("minimize",), target=None) -> dict:
    raw = {
        "study": {"objectives": list(objectives), "directions": list(directions)},
        "workload": {"name": workload, "max_steps": 2, "eval_every": 2},
        "systems": {"precision": "fp32", "attention": "eager", "optimizer": "forloop"},
    }
    if target is not None:
        raw["workload"]["target"] = target
    return raw


@pytest.mark.parametrize("name", sorted(BUILTIN_WORKLOADS))
def test_every_builtin_workload_declares_a_direction_for_each_metric(name):
    declared = metrics_of(name)
    assert declared and all(d in ("minimize", "maximize") for d in declared.values())
    assert declared["val_loss"] == "minimize"


def test_the_target_direction_comes_from_the_declaration_not_the_name():
    # val_f1 contains no "accuracy": the old guess minimized it, so 0.5 "reached" a target of 0.9.
    raw = _space("metric_workloads:F1Declared", ["time_to_target_s"], ["minimize"], target={"val_f1": 0.9})
    target = representative_config(parse_space(raw, "f1.yaml")).training.target
    assert target.direction == "maximize"
    assert not target.reached({"val_f1": 0.5}) and target.reached({"val_f1": 0.95})


@pytest.mark.parametrize(
    "objectives,directions,target",
    [
        (["time_to_target_s"], ["minimize"], {"val_f1": 0.9}),
        (["val_loss"], ["minimize"], {"val_f1": 0.9}),  # an objective's direction says nothing about val_f1
    ],
)
def test_a_target_of_unknown_direction_is_refused(objectives, directions, target):
    raw = _space("metric_workloads:F1Named", objectives, directions, target)
    with pytest.raises(UserInputError) as info:
        parse_space(raw, "f1.yaml")
    message = str(info.value)
    assert message.startswith("f1.yaml: workload.target: ") and "declare it on the workload: metrics = {" in message


@pytest.mark.parametrize(
    "objectives,directions",
    [(["val_f1"], ["maximize"]), (["val_loss"], ["minimize"]), (["train_samples_per_s", "val_loss"], ["maximize", "minimize"])],
)
def test_an_undeclared_objective_takes_the_direction_the_study_gives_it(objectives, directions):
    """A workload whose `metrics` is a plain tuple: the study file's directions are the declaration."""
    config = representative_config(parse_space(_space("metric_workloads:F1Named", objectives, directions), "f1.yaml"))
    assert (config.objectives, config.directions) == (tuple(objectives), tuple(directions))


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_a_target_on_an_undeclared_objective_takes_the_study_direction(direction):
    raw = _space("metric_workloads:F1Named", ["val_f1"], [direction], target={"val_f1": 0.9})
    target = representative_config(parse_space(raw, "f1.yaml")).training.target
    assert target.direction == direction
    assert target.reached({"val_f1": 0.95}) == (direction == "maximize")


def test_systems_metrics_need_no_declaration():
    raw = _space("metric_workloads:F1Named", ["train_samples_per_s", "peak_mem_mb"], ["maximize", "minimize"])
    assert parse_space(raw, "f1.yaml").study.objectives == ["train_samples_per_s", "peak_mem_mb"]


@pytest.mark.parametrize(
    "workload,objective,direction,declared",
    [
        ("metric_workloads:F1Declared", "val_f1", "minimize", "maximize"),
        ("causal_lm", "val_loss", "maximize", "minimize"),
        ("causal_lm", "train_samples_per_s", "minimize", "maximize"),
    ],
)
def test_a_direction_that_contradicts_the_declared_one_is_refused(workload, objective, direction, declared):
    with pytest.raises(
        UserInputError, match=rf"study\.directions\.0: '{objective}' is declared {declared} .*got {direction}; write {declared}"
    ):
        parse_space(_space(workload, [objective], [direction]), "f1.yaml")


def test_a_declared_direction_must_be_minimize_or_maximize(monkeypatch):
    import metric_workloads

    monkeypatch.setattr(metric_workloads.F1Declared, "metrics", {"val_f1": "up", "val_loss": "minimize"})
    with pytest.raises(UserInputError, match=r"workload\.name: .*each direction must be one of"):
        parse_space(_space("metric_workloads:F1Declared"), "f1.yaml")


def test_hpo_validate_refuses_a_target_of_unknown_direction_in_one_line(tmp_path):
    path = tmp_path / "f1.yaml"
    path.write_text(yaml.safe_dump(_space("metric_workloads:F1Named", ["time_to_target_s"], ["minimize"], {"val_f1": 0.9})))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    proc = subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", "validate", str(path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"hpo validate: error: {path}: workload.target: ")
    assert "'val_f1'" in line and "metrics = {'val_f1': 'minimize'} (or 'maximize')" in line


@pytest.mark.parametrize(
    "workload,direction,code",
    [("metric_workloads:F1Named", "minimize", 0), ("metric_workloads:F1Declared", "maximize", 2)],
)
def test_hpo_validate_takes_the_study_direction_of_an_undeclared_objective_and_refuses_a_contradiction(
    tmp_path, workload, direction, code
):
    path = tmp_path / "f1.yaml"
    path.write_text(yaml.safe_dump(_space(workload, ["val_loss"], [direction])))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    proc = subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", "validate", str(path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == code, proc.stderr
    if code:
        (line,) = proc.stderr.strip().splitlines()
        assert line == (
            f"hpo validate: error: {path}: study.directions.0: 'val_loss' is declared minimize "
            f"(by workload '{workload}'), got maximize; write minimize"
        )
