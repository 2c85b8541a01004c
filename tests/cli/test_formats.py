"""`--format json` on a real tiny study: a trial has one shape whether `hpo run`, `hpo best` or
`hpo train` prints it, a knob row one shape whether `hpo probe` or `hpo doctor --study` prints it,
and a written file one shape in `hpo export` and `hpo report`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from space_files import write_space

from hpo.app.output import KNOB_ROW_KEYS, TRIAL_KEYS, WRITTEN_KEYS

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
SPACE = {
    "study": {"name": "shapes", "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"}, "n_trials": 2},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 3, "eval_every": 3, "n_blocks": 2},
    "params": {"lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True}},
    "systems": {"precision": "fp32", "attention": "eager", "optimizer": ["forloop", "foreach"], "compile_backend": "eager"},
}


def _hpo(cwd: Path, *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", *argv], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> tuple[Path, list[dict]]:
    """A two-trial study, run once; its `hpo run --format json` output."""
    folder = tmp_path_factory.mktemp("shapes")
    write_space(folder / "space.yaml", SPACE)
    return folder, json.loads(_hpo(folder, "run", "space.yaml", "--in-process", "--format", "json"))


def test_run_prints_the_best_trials_as_best_does(study):
    folder, ran = study
    assert ran == json.loads(_hpo(folder, "best", "--study", "shapes", "--format", "json"))
    assert ran == json.loads(_hpo(folder, "best", "--study", "shapes", "--json"))  # the older spelling
    (trial,) = ran  # one objective: one best trial
    assert tuple(trial) == TRIAL_KEYS
    assert trial["state"] == "COMPLETE" and trial["verdict"] == "ok" and trial["objectives"] == ["val_loss"]
    assert len(trial["values"]) == 1 and math.isfinite(trial["values"][0])
    assert set(trial["params"]) == {"lr", "optimizer"}  # the hyperparameter and the searched knob
    assert trial["knobs_requested"] == trial["user_attrs"]["knobs_requested"]
    assert trial["knobs_observed"]["optimizer"] == trial["params"]["optimizer"]
    assert _hpo(folder, "best", "--study", "shapes").startswith("Pareto front of study 'shapes' (1 trial):\ntrial  val_loss")


def test_train_prints_a_trial_in_the_same_shape(study):
    folder, (best,) = study
    written = json.loads(_hpo(folder, "export", "--study", "shapes", "-o", "best.yaml", "--format", "json"))
    assert written == [{"number": best["number"], "what": "yaml", "path": "best.yaml"}]
    trained = json.loads(_hpo(folder, "train", "best.yaml", "--format", "json"))
    assert tuple(trained) == TRIAL_KEYS and (trained["number"], trained["state"]) == (None, None)
    assert (trained["verdict"], trained["objectives"]) == ("ok", ["val_loss"])
    assert trained["knobs_observed"] == best["knobs_observed"] and trained["params"]["lr"] == best["params"]["lr"]
    assert trained["values"] == pytest.approx(best["values"], rel=1e-6)


def test_probe_and_doctor_print_knob_rows_in_the_same_shape(study):
    folder, _ = study
    probed = json.loads(_hpo(folder, "probe", "space.yaml", "--study", "shapes", "--format", "json"))
    assert [tuple(row) for row in probed] == [KNOB_ROW_KEYS] * 2
    assert {row["knobs"]["optimizer"] for row in probed} == {"forloop", "foreach"}
    assert all(row["verdict"] == "ok" and row["samples_per_s"] > 0 and row["cached"] for row in probed)  # the run probed them
    report = json.loads(_hpo(folder, "doctor", "--study", "shapes", "--format", "json"))
    cached = {json.dumps(row["knobs"], sort_keys=True): row for row in report["verdicts"]}
    for row in probed:
        mine = cached[json.dumps(row["knobs"], sort_keys=True)]
        assert tuple(mine) == KNOB_ROW_KEYS and mine["verdict"] == row["verdict"] and mine["device"]


def test_export_top_and_report_print_the_files_they_wrote(study):
    folder, _ = study
    top = json.loads(_hpo(folder, "export", "--study", "shapes", "--top", "-o", "top", "--format", "json"))
    assert [tuple(w) for w in top] == [WRITTEN_KEYS] * 2 and all((folder / w["path"]).is_file() for w in top)
    assert json.loads(_hpo(folder, "report", "--study", "shapes", "-o", "r.html", "--json")) == [
        {"number": None, "what": "report", "path": "r.html"}
    ]
    assert json.loads(_hpo(folder, "validate", "space.yaml", "--format", "json")) == {
        "file": "space.yaml",
        "study": "shapes",
        "workload": "toy_workloads:Toy",
        "params": ["lr"],
        "searched_knobs": ["optimizer"],
    }
