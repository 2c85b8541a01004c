"""Each exit code of `hpo.errors.EXIT_CODES`, provoked for real: 0 when at least one trial trained
normally (others may have been rejected, pruned or failed), 1 when none did, 2 for bad input, 3 when
the storage is unreachable or fails, 4 when no knob combination can run here, 5 when a worker
failed, 70 for a bug in hpo, 130 for Ctrl-C and 143 for SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from space_files import write_space

from hpo.errors import EXIT_CODES, ExitCode

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")


def _space(tmp_path: Path, precision, **workload) -> Path:
    space = {
        # Speed unjudged: on a CPU that emulates fp16 a machine fact would reject it as slow first.
        "study": {
            "name": "codes",
            "sampler": {"name": "random", "seed": 0},
            "pruner": {"name": "none"},
            "n_trials": 3,
            "skip_slow": False,
        },
        # overflow pushes activations past fp16's range: every fp16 trial is rejected by the probe.
        "workload": {"name": "toy_workloads:Toy", "max_steps": 3, "eval_every": 3, "overflow": 1.0e5, "n_blocks": 2, **workload},
        "systems": {"precision": precision, "attention": "eager", "optimizer": "fused", "compile_backend": "eager"},
    }
    return write_space(tmp_path / "space.yaml", space)


def _hpo(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "hpo.app.cli", *argv]
    return subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)


def _with_fault(tmp_path: Path, fault: str, argv: list[str]) -> subprocess.CompletedProcess:
    """`hpo ARGV` in a process where `fault` (Python code) has broken something first."""
    code = f"import sys; {fault}; from hpo.app.cli import main; sys.exit(main({argv!r}))"
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)


def test_each_code_means_one_thing_and_the_table_says_what():
    assert len({int(c) for c in ExitCode}) == len(ExitCode.__members__)  # no alias: one meaning per code
    assert set(EXIT_CODES) == set(ExitCode) and all(EXIT_CODES.values())
    assert (ExitCode.INTERRUPTED, ExitCode.TERMINATED) == (128 + signal.SIGINT, 128 + signal.SIGTERM)


def test_a_study_in_which_no_trial_trained_exits_1(tmp_path):
    run = _hpo(tmp_path, "run", str(_space(tmp_path, "fp16")), "--in-process")
    assert run.returncode == ExitCode.NO_TRIAL_TRAINED == 1, run.stderr[-2000:]
    assert "no best trial: study 'codes' has no completed trial with verdict ok yet" in run.stderr
    assert run.stderr.count("[incompatible: non-finite") == 3


def test_a_study_with_one_trained_trial_among_rejected_ones_exits_0(tmp_path):
    run = _hpo(tmp_path, "run", str(_space(tmp_path, ["fp16", "fp32"])), "--in-process")
    assert run.returncode == ExitCode.OK == 0, run.stderr[-2000:]
    assert "[incompatible: non-finite" in run.stderr and "[ok]" in run.stderr
    assert run.stdout.startswith("Pareto front of study 'codes' (1 trial):")  # the best trial, as `hpo best` shows it


def test_a_sampler_whose_package_is_missing_is_refused_before_anything_is_stored(tmp_path):
    space = {"study": {"name": "nocma", "sampler": {"name": "cmaes"}}, "workload": {"name": "toy_workloads:Toy"}}
    write_space(tmp_path / "space.yaml", space)
    fault = "import hpo.deps as d; d.is_installed = lambda m: m != 'cmaes'; import hpo.study._samplers as s; "
    run = _with_fault(tmp_path, fault + "s.is_installed = d.is_installed", ["run", "space.yaml"])
    assert run.returncode == ExitCode.BAD_INPUT == 2, run.stderr
    assert "study.sampler.name: cmaes needs cmaes: pip install cmaes" in run.stderr
    assert not (tmp_path / "studies").exists()  # nothing stored


def test_a_storage_whose_server_refuses_exits_3(tmp_path):
    best = _hpo(tmp_path, "best", "--study", "s", "--storage", "postgresql+psycopg://postgres@127.0.0.1:1/hpo")
    assert best.returncode == ExitCode.STORAGE_UNREACHABLE == 3, best.stderr
    assert best.stderr.startswith("hpo best: error: ") and "Traceback" not in best.stderr


def test_a_storage_that_fails_during_a_command_exits_3_in_one_line(tmp_path):
    fault = (
        "import sqlalchemy.exc, hpo.app.best_and_export as r; "
        "r.open_study = lambda *a: (_ for _ in ()).throw(sqlalchemy.exc.OperationalError("
        "'SELECT 1', {}, Exception('server closed the connection unexpectedly')))"
    )
    best = _with_fault(tmp_path, fault, ["best", "--study", "s"])
    assert best.returncode == ExitCode.STORAGE_UNREACHABLE, best.stderr
    (line,) = best.stderr.strip().splitlines()
    assert line == "hpo best: error: the storage failed (server closed the connection unexpectedly)"


def test_a_probe_where_no_knob_combination_runs_exits_4(tmp_path):
    probe = _hpo(tmp_path, "probe", str(_space(tmp_path, "fp16")))
    assert probe.returncode == ExitCode.NO_KNOBS_RUN_HERE == 4, probe.stderr[-2000:]
    assert "no knob combination of" in probe.stderr and "incompatible: non-finite" in probe.stdout


def test_a_searched_knob_none_of_whose_values_runs_here_exits_4_at_run_and_at_worker_start(tmp_path):
    """Checked before the first trial, in a child of the worker's forkserver (`hpo run`, one worker)
    and again by `hpo worker`: one line per value that cannot run, and no trial."""
    space = yaml.safe_load(_space(tmp_path, "fp32").read_text())
    space["systems"]["attention"] = ["flash_attn", "xformers"]  # neither is installed here
    write_space(tmp_path / "space.yaml", space)
    run = _hpo(tmp_path, "run", "space.yaml")
    assert run.returncode == ExitCode.NO_KNOBS_RUN_HERE == 4, run.stderr[-2000:]
    header = "study 'codes': no knob combination can run on this machine (cpu: "
    said = run.stderr.split(header, 1)[1].splitlines()[1:]
    assert [line.split(" ")[0] for line in said] == ["attention=flash_attn", "attention=xformers"], run.stderr
    url = "sqlite:///studies/codes.db"
    worker = subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", "worker", "--study", "codes"],
        cwd=tmp_path, env={**ENV, "HPO_STORAGE": url}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert worker.returncode == 4 and "hpo worker: study 'codes': no knob combination can run" in worker.stderr
    assert optuna.load_study(study_name="codes", storage=f"sqlite:///{tmp_path / 'studies/codes.db'}").trials == []


def test_a_worker_that_cannot_go_on_exits_5(tmp_path):
    """A CUDA error that poisons the device: the in-process worker cannot replace its process, so it stops."""
    space = _space(tmp_path, "fp32", name="fault_workloads:Faulty", fault="sticky", sticky_attention="eager")
    run = _hpo(tmp_path, "run", str(space), "--in-process")
    assert run.returncode == ExitCode.WORKER_FAILED == 5, run.stderr[-2000:]
    assert "the device is unusable after a sticky error" in run.stderr


def test_a_bug_in_hpo_exits_70_with_its_traceback(tmp_path):
    fault = "import hpo.config.space as s; s.load_space = lambda path: 1 / 0"
    validate = _with_fault(tmp_path, fault, ["validate", "space.yaml"])
    assert validate.returncode == ExitCode.INTERNAL_ERROR == 70, validate.stderr
    assert "Traceback" in validate.stderr and "ZeroDivisionError" in validate.stderr
    assert validate.stderr.strip().splitlines()[-1].startswith("hpo validate: internal error (exit 70)")


def _sigint_at_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("sent", "code", "says", "kind"),
    [
        (signal.SIGINT, ExitCode.INTERRUPTED, "hpo: interrupted", "interrupted"),
        (signal.SIGTERM, ExitCode.TERMINATED, "SIGTERM: stopping", "terminated"),
    ],
)
def test_a_run_stopped_by_a_signal_exits_128_plus_the_signal(tmp_path, sent, code, says, kind):
    space = _space(tmp_path, "fp32", max_steps=1_000_000)
    log = tmp_path / "stderr.txt"
    with log.open("w") as err:
        cmd = [sys.executable, "-m", "hpo.app.cli", "run", str(space), "--in-process"]
        # As a terminal's foreground job gets it: SIGINT at its default. A shell without job control
        # starts a background job (and so this suite, and its children) with SIGINT ignored, and a
        # Python started so never installs its KeyboardInterrupt handler (seen: CI launched by `(… &)`).
        run = subprocess.Popen(
            cmd, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=err, text=True, preexec_fn=_sigint_at_default
        )
        try:
            deadline = time.monotonic() + 240
            while "trial 0 step 3/" not in log.read_text() and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)  # until the first trial is training
            run.send_signal(sent)
            run.wait(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
    assert run.returncode == code, log.read_text()[-2000:]
    assert says in log.read_text()
    # The trial it stopped is not left RUNNING: FAIL with the signal's verdict, and its retry queued.
    study = optuna.load_study(study_name="codes", storage=f"sqlite:///{tmp_path / 'studies' / 'codes.db'}")
    assert [t.state.name for t in study.trials] == ["FAIL", "WAITING"]
    stopped, retry = study.trials
    assert stopped.user_attrs["verdict"].startswith(f"{kind}: ")
    assert retry.state == optuna.trial.TrialState.WAITING and retry.params == stopped.params


# Sends SIGTERM from inside the commit of the first intermediate value the main thread stores, so
# the signal's handler runs inside SQLAlchemy's commit (raising there had left SQLite's write lock
# held: the worker's clean-up failed, and it exited 3, as seen once in CI).
SIGTERM_IN_A_COMMIT = """
import os, signal, sys, threading
import sqlalchemy
from sqlalchemy.engine import Engine
sent = []
@sqlalchemy.event.listens_for(Engine, "commit")
def _terminate_inside(conn):
    if sent or threading.current_thread() is not threading.main_thread():
        return
    frame = sys._getframe()
    while frame is not None and frame.f_code.co_name != "set_trial_intermediate_value":
        frame = frame.f_back
    if frame is not None:
        sent.append(True)
        os.kill(os.getpid(), signal.SIGTERM)
"""


def test_a_sigterm_that_arrives_inside_a_storage_commit_still_exits_143_and_queues_the_retry(tmp_path):
    space = _space(tmp_path, "fp32", max_steps=1_000_000)
    run = _with_fault(tmp_path, f"exec({SIGTERM_IN_A_COMMIT!r})", ["run", str(space), "--in-process"])
    assert run.returncode == ExitCode.TERMINATED, run.stderr[-2000:]
    assert "trial 0 terminated: its worker was stopped by SIGTERM; retrying" in run.stderr
    study = optuna.load_study(study_name="codes", storage=f"sqlite:///{tmp_path / 'studies' / 'codes.db'}")
    stopped, retry = study.trials
    assert stopped.state == optuna.trial.TrialState.FAIL and stopped.intermediate_values  # the interrupted commit landed
    assert retry.state == optuna.trial.TrialState.WAITING and retry.params == stopped.params
