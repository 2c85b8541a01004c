"""No trial is spent on a knob value this machine cannot run: a worker checks the space's values
when it starts (`hpo.runtime._machine_check`, the check `hpo doctor` shows), says each one it leaves
out on stderr and in the study note, and its sampler never proposes them. On this CPU: sdpa_cudnn
has no kernel, flash-attn, xformers and NVIDIA apex are not installed."""

from __future__ import annotations

import socket

import optuna
import pytest
from optuna_dashboard._note import get_note_from_system_attrs

from hpo.config.space import parse_space
from hpo.runtime import run_worker
from hpo.runtime._machine_check import NothingRunsHere, forget_checks
from hpo.storage import storage_of, study_id_of
from hpo.study import AvoidKnownFailures, avoiding_here, create_or_resume
from hpo.verify.machine import nothing_left, searched_parts

NOT_HERE = {"attention": {"sdpa_cudnn", "flash_attn", "xformers"}, "optimizer": {"apex"}}


def _space(name: str, attention: list[str], optimizer: list[str], n_trials: int = 8):
    return parse_space(
        {
            "study": {"name": name, "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"}, "n_trials": n_trials},
            "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2, "n_blocks": 1},
            "params": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}},
            "systems": {"precision": "fp32", "attention": attention, "optimizer": optimizer, "device": "cpu"},
        },
        source="test",
    )


@pytest.fixture(autouse=True)
def _fresh_checks():
    forget_checks()  # another test's check (other packages installed) must not answer for this one
    yield
    forget_checks()


@pytest.mark.slow
def test_an_8_trial_study_spends_no_trial_on_values_this_cpu_cannot_run(tmp_path, capsys):
    space = _space("here", ["eager", "sdpa", "sdpa_cudnn", "flash_attn", "xformers"], ["forloop", "fused", "apex"])
    url = f"sqlite:///{tmp_path / 'here.db'}"
    study = create_or_resume(space, url)
    run_worker(study, url, isolate=False)

    trials = study.get_trials()
    assert len(trials) == 8
    for trial in trials:  # every trial's params, and what it recorded
        assert trial.params["attention"] not in NOT_HERE["attention"], trial.params
        assert trial.params["optimizer"] not in NOT_HERE["optimizer"], trial.params
        assert trial.user_attrs["verdict"] == "ok", trial.user_attrs["verdict"]

    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("not proposed on this machine")]
    assert len(said) == 4, said
    for value in ["attention=sdpa_cudnn: No viable backend", "attention=flash_attn needs the flash-attn package"]:
        assert sum(value in line for line in said) == 1, said
    stored = study.user_attrs[f"hpo:not_runnable:{socket.gethostname()}"]
    assert len(stored["lines"]) == 4 and stored["device"].startswith("cpu")
    note = get_note_from_system_attrs(storage_of(study).get_study_system_attrs(study_id_of(study)), None)["body"]
    assert "## Not proposed on these machines" in note
    assert all(f"- {line}" in note for line in stored["lines"])


def test_a_searched_knob_with_no_value_that_runs_here_ends_the_worker_before_any_trial(tmp_path):
    space = _space("none-here", ["flash_attn", "xformers"], ["forloop", "fused"])
    url = f"sqlite:///{tmp_path / 'none.db'}"
    study = create_or_resume(space, url)
    with pytest.raises(NothingRunsHere) as raised:
        run_worker(study, url, isolate=False)
    assert [line.split(" ")[0] for line in raised.value.lines] == ["attention=flash_attn", "attention=xformers"]
    assert study.get_trials() == []


PAIR = (("attention", "sdpa_flash"), ("precision", "fp32"))


def test_a_pair_refused_here_is_avoided_as_a_pair_and_each_value_stays():
    study = optuna.create_study(sampler=AvoidKnownFailures(optuna.samplers.RandomSampler(seed=3), seed=3))

    def objective(trial):
        trial.suggest_categorical("precision", ["fp32", "bf16"])
        trial.suggest_categorical("attention", ["sdpa_flash", "eager"])
        return 0.0

    with avoiding_here([PAIR]):
        study.optimize(objective, n_trials=40)
    seen = {(t.params["precision"], t.params["attention"]) for t in study.trials}
    assert seen == {("bf16", "sdpa_flash"), ("fp32", "eager"), ("bf16", "eager")}
    study.optimize(objective, n_trials=40)  # outside: this process avoids nothing any more
    assert ("fp32", "sdpa_flash") in {(t.params["precision"], t.params["attention"]) for t in study.trials}


def test_a_pair_with_a_fixed_knob_is_the_searched_value_alone_and_can_leave_nothing():
    systems = {"precision": ["fp32"], "attention": ["sdpa_flash", "eager"], "optimizer": ["fused"]}
    assert searched_parts(systems, [PAIR]) == {(("attention", "sdpa_flash"),)}
    assert searched_parts({**systems, "precision": ["bf16"]}, [PAIR]) == set()  # never applies
    assert not nothing_left(systems, [PAIR])
    assert nothing_left({**systems, "attention": ["sdpa_flash"]}, [PAIR])
    assert nothing_left(systems, [PAIR, (("attention", "eager"),)])


CHILD_CHECK = """
import json, sys
from hpo.config.space import parse_space
from hpo.runtime._machine_check import check_machine

if __name__ == "__main__":
    space = parse_space({"study": {"name": "c"}, "workload": {"name": "causal_lm"},
                         "systems": {"attention": ["sdpa", "flash_attn"], "device": "cpu"}}, source="test")
    check = check_machine(space, in_child=True)
    print(json.dumps([[n.line() for n in check.not_runnable], "torch" in sys.modules]))
"""


@pytest.mark.slow
def test_the_check_runs_in_a_child_and_the_worker_imports_no_torch(tmp_path):
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "check.py"  # a file: a spawned child re-imports its parent's main module
    script.write_text(CHILD_CHECK)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines, torch_imported = json.loads(done.stdout.splitlines()[-1])
    assert [line.split(" ")[0] for line in lines] == ["attention=flash_attn"] and not torch_imported
