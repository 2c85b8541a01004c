"""An objective a trial trained normally but could not produce is a result with the worst value, not
an error: a target never reached (`target_reached: false`), an MFU with no known peak. It ends
COMPLETE with verdict ok, is never retried, and is never the best while a trial produced the
value. A workload metric that evaluate() does not return is a workload bug: an error."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.trial import TrialState

from hpo.config.space import parse_space
from hpo.errors import UserInputError
from hpo.reporting import best_trials
from hpo.runtime import run_worker
from hpo.study import create_or_resume

FIXED_F1 = "metric_workloads:FixedF1"


def _space(objectives, directions, n_trials: int, **workload) -> dict:
    return {
        "study": {
            "name": "unproduced",
            "objectives": objectives,
            "directions": directions,
            "sampler": {"name": "random", "seed": 0},
            "pruner": {"name": "none"},
            "n_trials": n_trials,
            "skip_slow": False,
        },
        "workload": {"name": FIXED_F1, "max_steps": 4, "eval_every": 2, "d_model": 8, "seq_len": 8, "n_blocks": 1, **workload},
        "params": {"lr": 3.0e-3, "batch_size": 8},
        "systems": {"precision": "fp32", "attention": "eager", "optimizer": "forloop", "compile_backend": "eager"},
    }


def _run(space: dict, url: str, enqueue=()) -> optuna.Study:
    study = create_or_resume(parse_space(space, source="test"), url)
    for params in enqueue:
        study.enqueue_trial(params)
    run_worker(study, url, isolate=False)
    return optuna.load_study(study_name="unproduced", storage=url)


@pytest.mark.slow
def test_a_target_never_reached_completes_with_the_worst_value_and_is_not_retried(storage_url):
    space = _space(["time_to_target_s"], ["minimize"], 2, target={"val_f1": 0.9})
    space["params"]["f1"] = {"choices": [0.5, 0.95]}  # trial 0 evaluates below the target, trial 1 above it
    study = _run(space, storage_url, enqueue=[{"f1": 0.5}, {"f1": 0.95}])
    missed, reached = study.trials  # two trials: nothing failed, nothing was retried
    assert (missed.state, reached.state) == (TrialState.COMPLETE, TrialState.COMPLETE)
    assert missed.user_attrs["verdict"] == reached.user_attrs["verdict"] == "ok"
    assert missed.user_attrs["target_reached"] is False and missed.user_attrs["time_to_target_s"] is None
    assert missed.value == math.inf  # stored and read back as +inf by the RDB storage
    assert missed.user_attrs["steps_run"] == 4  # it trained to max_steps, looking for the target
    assert reached.user_attrs["target_reached"] is True and reached.value == pytest.approx(reached.user_attrs["time_to_target_s"])
    assert reached.user_attrs["steps_run"] == 2  # stopped at the first evaluation that reached it
    assert study.best_trial.number == 1 and [t.number for t in best_trials(study)] == [1]
    assert missed.constraints == {"0": 0.0}  # trained normally: nothing for the sampler to avoid


@pytest.mark.slow
def test_when_no_trial_reaches_the_target_there_is_no_best_and_hpo_says_why(tmp_path):
    space = _space(["time_to_target_s"], ["minimize"], 1, target={"val_f1": 0.9}, f1=0.5)
    study = _run(space, f"sqlite:///{tmp_path / 's.db'}")
    (missed,) = study.trials
    assert missed.state == TrialState.COMPLETE and missed.value == math.inf
    with pytest.raises(UserInputError, match=r"1 trials trained, but 1 never reached workload\.target \(target_reached: false\)"):
        best_trials(study)


@pytest.mark.slow
def test_mfu_with_no_known_peak_is_the_worst_value_not_an_error(tmp_path, monkeypatch):
    import hpo.hardware._peaks

    monkeypatch.setattr(hpo.hardware._peaks, "peak_for", lambda *args: None)  # an accelerator hpo knows no peak of
    study = _run(_space(["mfu"], ["maximize"], 1), f"sqlite:///{tmp_path / 's.db'}")
    (trial,) = study.trials
    assert trial.state == TrialState.COMPLETE and trial.user_attrs["verdict"] == "ok"
    assert trial.value == -math.inf and trial.user_attrs["mfu"] is None and trial.user_attrs["peak_source"] is None
    assert trial.user_attrs["achieved_tflops"] > 0  # what it did achieve is still recorded


@pytest.mark.slow
@pytest.mark.parametrize(
    "objectives,directions", [(["val_f1"], ["maximize"]), (["val_f1", "val_loss"], ["maximize", "minimize"])]
)
def test_an_objective_the_workload_does_not_return_is_an_error_naming_it(tmp_path, objectives, directions):
    space = _space(objectives, directions, 1, report_f1=False)
    space["study"]["max_retries"] = 0
    study = _run(space, f"sqlite:///{tmp_path / 's.db'}")
    (trial,) = study.trials
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs["verdict"] == (
        "error: MetricNotReturned: study.objectives names 'val_f1', but the workload's evaluate() returned "
        "['val_loss']; return 'val_f1' from evaluate() or optimize one of those"
    )


@pytest.mark.parametrize(
    "objective,direction,compile_,max_steps,needed",
    [
        ("train_samples_per_s", "maximize", False, 1, 2),
        ("train_samples_per_s", "maximize", [False, "default"], 1, 2),  # the compiling step trains
        ("mfu", "maximize", [False, "default"], 2, 3),
        ("step_time_ms", "minimize", False, 1, 2),
    ],
)
def test_a_speed_objective_with_no_steady_step_to_time_is_refused_by_validate(objective, direction, compile_, max_steps, needed):
    space = _space([objective], [direction], 1, max_steps=max_steps, eval_every=1)
    space["systems"]["compile"] = compile_
    with pytest.raises(
        UserInputError,
        match=rf"^test: workload\.max_steps: objective {objective} is timed on .* steps.*set max_steps >= {needed}$",
    ):
        parse_space(space, source="test")
    space["workload"]["max_steps"] = needed
    assert parse_space(space, source="test").study.objectives == [objective]


def test_time_to_target_without_a_target_is_refused_by_validate():
    with pytest.raises(UserInputError, match=r"^test: study\.objectives: time_to_target_s needs workload\.target"):
        parse_space(_space(["time_to_target_s"], ["minimize"], 1), source="test")
