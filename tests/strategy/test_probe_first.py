"""`study.strategy: probe_first` end to end: the opening sweep decides the knobs, every trial
records that it did and at which rank, the sweep's table is the study's note, nothing verified
ends the study at once (exit 1), and with two workers the sweep runs once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from hpo.config.space import parse_space
from hpo.errors import ExitCode
from hpo.reporting import KEPT_ATTR
from hpo.storage import storage_of, study_id_of
from hpo.strategy import LOCK_ATTR

ROOT = Path(__file__).resolve().parents[2]
SPACE = {
    "study": {
        "name": "pf",
        "sampler": {"name": "random", "seed": 0},
        "pruner": {"name": "none"},
        "n_trials": 3,
        "strategy": "probe_first",
        # Speed unjudged: on a CPU that emulates fp16 a machine fact would reject it as slow first.
        "skip_slow": False,
    },
    # overflow pushes activations past fp16's range: fp16 is incompatible whatever else is chosen.
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2, "overflow": 1.0e5},
    "params": {"lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True}, "batch_size": 8},
    "systems": {"precision": ["fp32", "fp16"], "attention": ["eager", "sdpa"], "optimizer": ["forloop", "fused"]},
}
DECIDED = "Knobs decided by the opening sweep"


def _hpo(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(env or os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
    return subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _study_note(study: optuna.Study) -> str:
    from optuna_dashboard._note import get_note_from_system_attrs

    return get_note_from_system_attrs(storage_of(study).get_study_system_attrs(study_id_of(study)), None)["body"]


@pytest.mark.slow
def test_the_sweep_decides_the_knobs_and_every_trial_says_so(tmp_path):
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    run = _hpo("run", "space.yaml", "--in-process", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    study = optuna.load_study(study_name="pf", storage=f"sqlite:///{tmp_path / 'studies' / 'pf.db'}")
    decided = study.user_attrs[KEPT_ATTR]
    assert [k["knobs"]["precision"] for k in decided["kept"]] == ["fp32"]  # fp16 rejected, one kept (keep_fastest 1)
    assert decided["rejected"] == [next(line for line in decided["rejected"] if line.startswith("precision=fp16: incompatible"))]
    kept = decided["kept"][0]["knobs"]
    for trial in study.trials:
        assert trial.user_attrs["verdict"] == "ok"  # no trial rejected after the sweep
        assert (trial.user_attrs["knobs_chosen_by"], trial.user_attrs["knobs_sweep_rank"]) == ("sweep", 1)
        assert trial.user_attrs["knobs_requested"] == kept
        assert set(trial.params) == {"lr"}  # one precision kept: only the hyperparameters are searched
    assert DECIDED in run.stderr
    note = _study_note(study)  # the sweep's table, then (as each worker ends) the knob-effect table
    assert note.startswith(f"## {DECIDED}") and "fp16       eager" in note and "What each knob did (3 trials)" in note


def test_nothing_verified_ends_the_study_at_once_with_a_line_per_rejected_value(tmp_path):
    space = {**SPACE, "systems": {**SPACE["systems"], "precision": "fp16", "attention": "eager", "optimizer": "forloop"}}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    run = _hpo("run", "space.yaml", "--in-process", cwd=tmp_path)
    assert run.returncode == ExitCode.NO_KNOBS_RUN_HERE, run.stderr[-3000:]
    lines = run.stderr.splitlines()
    assert any(line.startswith("precision=fp16: incompatible: non-finite") for line in lines), run.stderr[-3000:]
    study = optuna.load_study(study_name="pf", storage=f"sqlite:///{tmp_path / 'studies' / 'pf.db'}")
    assert study.trials == []  # no trial spent


@pytest.mark.slow
def test_two_workers_on_postgres_run_the_sweep_once(postgres_url, tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "workers"))
    from worker_harness import STUDY, create_study, start_worker, trials

    space = {**SPACE, "study": {**SPACE["study"], "name": STUDY, "n_trials": 4}}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    create_study(path, postgres_url)
    workers = [start_worker(postgres_url, "--in-process", log=tmp_path / f"worker{i}.log") for i in range(2)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0]
    logs = [(tmp_path / f"worker{i}.log").read_text() for i in range(2)]
    assert sum(DECIDED in log for log in logs) == 1, logs  # one swept
    assert sum("waiting for the knob sweep" in log for log in logs) <= 1
    found = trials(postgres_url)
    assert len(found) == 4 and all(t.user_attrs["knobs_chosen_by"] == "sweep" for t in found)
    study = optuna.load_study(study_name=STUDY, storage=postgres_url)
    assert study.user_attrs[f"{LOCK_ATTR}:0"]["pid"] in {w.pid for w in workers}


def test_the_race_warms_each_model_up_on_its_first_timing_only(monkeypatch):
    """probe_first's race keeps one model per candidate for all its rounds: only its first timing
    runs an untimed step; later ones only time (each untimed step of a MiniLM on one core cost 1.1 s).
    Equal times: both race until steady (`min_repeats` timings), neither is dropped."""
    from hpo.strategy import _race
    from hpo.verify.timing import StepTimes

    warmups: dict[str, list[int]] = {}

    def recording(assembled, batch, policy):
        warmups.setdefault(assembled.knobs.optimizer, []).append(policy.warmup_steps)
        return StepTimes((1.0,) * policy.min_repeats, policy.warmup_steps, policy.window)

    monkeypatch.setattr(_race, "time_model", recording)
    space = parse_space(SPACE, source="test")
    fixed = {"precision": "fp32", "attention": "eager", "grad_checkpointing": False, "compile": False}
    candidates = [{**fixed, "optimizer": o} for o in ("forloop", "fused")]
    times = _race.raced_times(space, {"fp32": candidates}, keep=1).times  # equal times: both race to the end
    rounds = _race.POLICY.min_repeats
    assert all(len(t) == rounds for t in times.values())
    assert warmups == {o: [1] + [0] * (rounds - 1) for o in ("forloop", "fused")}, warmups


def test_the_race_steps_the_sweeps_own_models_without_building_or_warming_them(monkeypatch, tmp_path):
    """The sweep's timed models are handed to the race (`hpo.strategy._warm_models`): no model is built
    again and none runs an untimed step (on a MiniLM that cut the race from 19.5 s to 8.9 s). Once
    nothing fits beside them, the race builds and warms up its own, as before."""
    from hpo.strategy import _probe_first as probe_first
    from hpo.strategy import _race
    from hpo.strategy import _warm_models as sweep_models

    built, policies = [], []
    real_build, real_time = _race.AssembledModel, _race.time_model
    monkeypatch.setattr(_race, "AssembledModel", lambda *a, **k: built.append(a[1]) or real_build(*a, **k))
    monkeypatch.setattr(_race, "time_model", lambda m, b, p: policies.append(p.warmup_steps) or real_time(m, b, p))
    monkeypatch.setenv("HPO_MACHINE_FACTS", str(tmp_path / "facts"))
    space = parse_space({**SPACE, "workload": {k: v for k, v in SPACE["workload"].items() if k != "overflow"}}, source="t")
    study = optuna.create_study(study_name="warm", storage=f"sqlite:///{tmp_path / 'warm.db'}")
    decided = probe_first._sweep_and_store(study, space, 0, say=lambda line: None)
    assert decided["timings"] > 0 and policies and set(policies) == {0} and built == []

    built.clear(), policies.clear()
    monkeypatch.setattr(sweep_models, "_device_bytes", lambda device: 0)  # nothing fits
    study = optuna.create_study(study_name="cold", storage=f"sqlite:///{tmp_path / 'cold.db'}")
    monkeypatch.setenv("HPO_MACHINE_FACTS", str(tmp_path / "facts-cold"))
    decided = probe_first._sweep_and_store(study, space, 0, say=lambda line: None)
    assert built and policies.count(1) == len(built)  # each built model warmed up once, on its first timing
