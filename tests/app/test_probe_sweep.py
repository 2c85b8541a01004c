"""`hpo probe`: every knob combination probed without training, ranked by throughput, its verdicts
cached in the study so that `hpo run` starts from them and never proposes a failing value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from hpo.app.output import KNOB_ROW_KEYS
from hpo.config.resolve import representative_values as sweep_values
from hpo.config.space import parse_space
from hpo.verify.stored import StudyVerdicts

ROOT = Path(__file__).resolve().parents[2]
SPACE = {
    # skip_slow off: this file is about ranking and seeding; a loaded machine must not turn a tiny
    # model's noisy timing into a slow verdict here (the slow proof has tests of its own).
    "study": {
        "name": "sweep",
        "sampler": {"name": "tpe", "seed": 0},
        "pruner": {"name": "none"},
        "n_trials": 4,
        "skip_slow": False,
    },
    # overflow pushes activations past fp16's range: fp16 is incompatible whatever else is chosen.
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2, "overflow": 1.0e5, "n_blocks": 2},
    "params": {"lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True}, "batch_size": {"low": 8, "high": 24, "step": 8}},
    "systems": {"precision": ["fp32", "fp16"], "attention": ["eager", "sdpa"], "optimizer": "fused", "compile_backend": "eager"},
}


def _hpo(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
    return subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_searched_hyperparameters_are_taken_at_their_middle():
    values = sweep_values(parse_space(SPACE, source="test"))
    assert values["batch_size"] == 16 and values["lr"] == pytest.approx(1.0e-3)  # log range: the geometric middle


def test_probe_ranks_every_combination_and_seeds_the_study(tmp_path):
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    probe = _hpo("probe", "space.yaml", "--study", "sweep", "--json", cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr[-2000:]
    rows = json.loads(probe.stdout)
    assert len(rows) == 4 and all(tuple(r) == KNOB_ROW_KEYS for r in rows)  # SPEC's five keys and the rest of a knob row
    ok = [r for r in rows if r["verdict"] == "ok"]
    assert {r["knobs"]["precision"] for r in ok} == {"fp32"} and all(r["samples_per_s"] > 0 for r in ok)
    assert [r["samples_per_s"] for r in ok] == sorted((r["samples_per_s"] for r in ok), reverse=True)
    fp16 = [r["verdict"] for r in rows if r["knobs"]["precision"] == "fp16"]
    assert all(v.startswith("incompatible: non-finite") for v in fp16), fp16
    # The first fp16 combination proves precision=fp16 at fault; the second inherits that proof and
    # says so instead of repeating the probe.
    assert sum("not probed: precision=fp16 was proven at fault" in v for v in fp16) == 1, fp16
    assert "probing knob combinations" in probe.stderr  # progress shown

    url = f"sqlite:///{tmp_path / 'studies' / 'sweep.db'}"
    study = optuna.load_study(study_name="sweep", storage=url)
    records = StudyVerdicts(study).all()
    probes = [r for r in records.values() if "reference_reused" in r]
    speeds = [r for r in records.values() if "batch_size" in r]
    # A probe verdict per probed combination (not the implied one: nothing measured it); a speed
    # fact at the batch size for each that passed.
    assert len(probes) == 3 and len(speeds) == len(ok) and all(r["verdict"] == "ok" for r in speeds)
    # One reference step for the model, read by the two other probed combinations.
    assert sorted(r["reference_reused"] for r in probes) == [False, True, True]
    run = _hpo("run", "space.yaml", "--in-process", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    trials = optuna.load_study(study_name="sweep", storage=url).trials
    assert all(t.params["precision"] == "fp32" for t in trials), [t.params for t in trials]  # fp16 never proposed


def test_after_a_sticky_device_error_the_sweep_moves_on_in_a_fresh_process(tmp_path):
    """`sdpa` raises CUDA's illegal-address error and poisons its process: every later model built
    there fails the same way. The combination after it must be probed in a fresh process and pass,
    and the error must be no verdict."""
    space = {
        **SPACE,
        "workload": {"name": "fault_workloads:Faulty", "max_steps": 2, "eval_every": 2, "fault": "sticky"},
        "systems": {"precision": "fp32", "attention": ["eager", "sdpa", "sdpa_math"], "optimizer": "forloop"},
    }
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    probe = _hpo("probe", "space.yaml", "--study", "sticky", "--json", cwd=tmp_path)
    rows = {r["knobs"]["attention"]: r["verdict"] for r in json.loads(probe.stdout)}
    assert rows == {
        "eager": "ok",
        "sdpa": "error: RuntimeError: CUDA error: an illegal memory access was encountered",
        "sdpa_math": "ok",  # probed after the error, in a process the error never touched
    }, probe.stderr[-3000:]
    assert "the rest are probed in a fresh process" in probe.stderr
    study = optuna.load_study(study_name="sticky", storage=f"sqlite:///{tmp_path / 'studies' / 'sticky.db'}")
    records = StudyVerdicts(study).all().values()
    assert {r["knobs"]["attention"] for r in records if "knobs" in r} == {"eager", "sdpa_math"}  # the error is not cached
