"""A knob that no evidence observed (null in `knobs_observed`) is shown as "not observed" by every
view: the dashboard note, the report, the progress line and `hpo best`; none shows the requested
value in its place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState, create_trial

from hpo.app.report import write_report
from hpo.reporting import _progress as progress
from hpo.reporting._knob_display import NOT_OBSERVED, observed_knob
from hpo.reporting._notes import trial_note

ROOT = Path(__file__).resolve().parents[2]
REQUESTED = {"precision": "fp32", "attention": "sdpa_flash", "optimizer": "fused", "grad_checkpointing": False, "compile": False}
OBSERVED = {**REQUESTED, "attention": None}  # the evidence saw no attention kernel run


def _trial() -> optuna.trial.FrozenTrial:
    attrs = {"verdict": "ok", "knobs_requested": REQUESTED, "knobs_observed": OBSERVED, "train_samples_per_s": 120.0}
    return create_trial(state=TrialState.COMPLETE, value=0.5, user_attrs=attrs)


def test_the_renderer_shows_null_or_missing_as_not_observed():
    attrs = _trial().user_attrs
    assert observed_knob(attrs, "attention") == NOT_OBSERVED == "not observed"
    assert observed_knob(attrs, "optimizer") == "fused"
    assert observed_knob({"knobs_requested": REQUESTED, "knobs_observed": {}}, "precision") == NOT_OBSERVED
    assert observed_knob({"knobs_requested": REQUESTED}, "precision") == NOT_OBSERVED


def test_the_dashboard_note():
    note = trial_note(_trial())
    assert "| attention | sdpa_flash | not observed |" in note
    assert "| optimizer | fused | fused |" in note


def test_the_progress_line(monkeypatch):
    events = []
    monkeypatch.setattr(progress, "_sink", events.append)
    progress.TrialPrinter()(None, _trial())
    line = progress._trial_text(events[0], total=4)
    assert "attention=not observed" in line and "sdpa_flash" not in line
    assert "optimizer=fused" in line


def test_the_report(tmp_path):
    study = optuna.create_study(direction="minimize")
    study.add_trial(_trial())
    write_report(study, tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert "<td>sdpa_flash &rarr; not observed</td>" in page
    assert "<td>fused</td>" in page  # observed as asked: shown once


def test_hpo_best(tmp_path):
    url = f"sqlite:///{tmp_path / 'seen.db'}"
    optuna.create_study(study_name="seen", storage=url, direction="minimize").add_trial(_trial())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    best = subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", "best", "--study", "seen", "--storage", url],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert best.returncode == 0, best.stderr
    header, row = best.stdout.splitlines()[1:3]
    # A plain-text table: each column starts where its header does.
    assert row[header.index("attention") :].startswith(NOT_OBSERVED)
    assert row[header.index("optimizer") :].startswith("fused")
    assert "sdpa_flash" not in best.stdout
