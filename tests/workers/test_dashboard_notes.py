"""Dashboard notes: every finished trial carries one, the study carries the knob-effect table, and
optuna-dashboard serves and renders them (read through its HTTP API and in headless Chromium)."""

from __future__ import annotations

import signal
import subprocess
import sys

import optuna
import pytest
from optuna_dashboard._note import get_note_from_system_attrs
from web import free_port, get_json, rendered_dom

from hpo.storage import storage_of, study_id_of, trial_id_of
from worker_harness import STUDY, hpo, hpo_env, space_file


def _notes(url: str) -> tuple[optuna.Study, dict]:
    study = optuna.load_study(study_name=STUDY, storage=url)
    return study, storage_of(study).get_study_system_attrs(study_id_of(study))


@pytest.mark.browser
def test_each_trial_and_the_study_get_notes_that_the_dashboard_renders(tmp_path):
    url = f"sqlite:///{tmp_path / 'notes.db'}"
    space = space_file(tmp_path, n_trials=3)
    run = hpo("run", space, "--storage", url)
    assert run.returncode == 0, run.stderr[-2000:]
    study, attrs = _notes(url)
    for trial in study.trials:
        body = get_note_from_system_attrs(attrs, trial_id_of(trial))["body"]
        assert body.startswith(f"## Trial {trial.number}: ok") and "| precision | fp32 | fp32 |" in body
        assert "samples/s" in body and "peak memory" in body
    study_body = get_note_from_system_attrs(attrs, None)["body"]
    assert study_body.startswith("## What each knob did (3 trials)")

    port = free_port()
    cmd = [sys.executable, "-m", "hpo.app.cli", "dashboard", "--study", STUDY, "--storage", url, "--port", str(port)]
    server = subprocess.Popen(cmd, env=hpo_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        detail = get_json(f"http://127.0.0.1:{port}/api/studies/{study_id_of(study)}")
        assert detail["note"]["body"] == study_body
        assert detail["trials"][1]["note"]["body"].startswith("## Trial 1: ok")
        page = f"http://127.0.0.1:{port}/dashboard/studies/{study_id_of(study)}/trials?numbers=1"
        dom = rendered_dom(page, tmp_path / "profile")
        assert "Trial 1: ok" in dom  # the note's Markdown heading, rendered by the dashboard's page
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
