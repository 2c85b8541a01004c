"""`hpo dashboard`: serves one study's storage, answers its HTTP API, stops cleanly on Ctrl-C,
and turns a bad or busy port into one line and exit 2."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from web import free_port, get_json

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))


@pytest.fixture
def study_db(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    study = optuna.create_study(study_name="dash", storage=url)
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=3)
    return url


def _dashboard(url: str, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "hpo.app.cli", "dashboard", "--study", "dash", "--storage", url, "--port", str(port)]
    return subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_dashboard_serves_the_study_and_stops_cleanly_on_ctrl_c(study_db):
    port = free_port()
    proc = _dashboard(study_db, port)
    try:
        studies = get_json(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
        assert [s["study_name"] for s in studies] == ["dash"]
        detail = get_json(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}")
        assert len(detail["trials"]) == 3
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"http://127.0.0.1:{port}/dashboard/studies/" in err and "dashboard stopped" in err
    assert "Traceback" not in err


def _one_line_exit_2(args: list[str]) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", "dashboard", *args], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
    return run.stderr


def test_port_out_of_range_is_one_line(study_db):
    err = _one_line_exit_2(["--study", "dash", "--storage", study_db, "--port", "99999"])
    assert "--port must be between 1 and 65535, got 99999" in err


def test_busy_port_is_one_line(study_db):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        err = _one_line_exit_2(["--study", "dash", "--storage", study_db, "--port", str(port)])
    assert f"cannot listen on 127.0.0.1:{port}: already in use" in err


def test_unknown_study_is_one_line(study_db):
    assert "study 'nope' not found" in _one_line_exit_2(["--study", "nope", "--storage", study_db, "--port", str(free_port())])
