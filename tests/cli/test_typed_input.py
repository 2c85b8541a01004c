"""Input a user will type, through the CLI in a subprocess: a wrong device name or an output file in
a missing folder exits 2 with one line and writes nothing; a probe where no knob combination can
run exits 1 (README: exit codes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from space_files import write_space

from hpo.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
TOY = {
    "study": {"name": "typed", "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"}, "n_trials": 2},
    # overflow pushes activations past fp16's range: every fp16 combination is rejected by the probe.
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2, "overflow": 1.0e5, "n_blocks": 2},
    "systems": {"precision": "fp16", "attention": "eager", "optimizer": "fused", "compile_backend": "eager"},
}


def _start(*args: str, cwd: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
    cmd = [sys.executable, "-m", "hpo.app.cli", *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _study(tmp: Path) -> str:
    from hpo.config.space import parse_space
    from hpo.study import create_or_resume

    url = f"sqlite:///{tmp / 'typed.db'}"
    study = create_or_resume(parse_space({**TOY, "systems": {**TOY["systems"], "precision": "fp32"}}, "t"), url)
    study.add_trial(
        optuna.trial.create_trial(params={}, distributions={}, value=0.5, user_attrs={"verdict": "ok", "config": {"format": 2}})
    )
    return url


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("typed")
    url = _study(tmp)
    write_space(tmp / "fp16.yaml", TOY)
    storage = ["--study", "typed", "--storage", url]
    cases = {
        "doctor device": ["doctor", "--device", "no-such-device"],
        "export into a missing folder": ["export", *storage, "-o", str(tmp / "missing" / "best.yaml")],
        "report into a missing folder": ["report", *storage, "-o", str(tmp / "missing" / "report.html")],
        "probe where nothing runs": ["probe", "fp16.yaml"],
    }
    started = {name: _start(*argv, cwd=tmp) for name, argv in cases.items()}
    results = {name: (proc.wait(timeout=300), *proc.communicate()) for name, proc in started.items()}
    return tmp, results


@pytest.mark.parametrize(
    "name,says",
    [
        ("doctor device", "--device no-such-device: not a device name; use auto, cpu, mps, cuda or cuda:N"),
        ("export into a missing folder", "best.yaml: folder {tmp}/missing does not exist; create it first"),
        ("report into a missing folder", "report.html: folder {tmp}/missing does not exist; create it first"),
    ],
)
def test_a_typo_exits_2_with_one_line_and_writes_nothing(outcomes, name, says):
    tmp, results = outcomes
    code, out, err = results[name]
    assert code == 2 and out == "" and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"hpo {name.split()[0]}: error: ") and says.format(tmp=tmp) in line
    assert not (tmp / "missing").exists()


def test_a_probe_where_no_combination_can_run_exits_4(outcomes):
    _, results = outcomes
    code, out, err = results["probe where nothing runs"]
    assert code == ExitCode.NO_KNOBS_RUN_HERE == 4, err[-2000:]
    assert "fp16" in out and "Traceback" not in err
    assert "no knob combination of fp16.yaml can run here" in err
