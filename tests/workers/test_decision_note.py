"""probe_first's decision heads the study note from the sweeping worker's first trial on: the sweep
stores the decision and writes no note (importing optuna_dashboard before any trial took 3 s of a
15 s sweep), and the worker writes the study note once its first trial ends, as well as at its end.
The claim loop runs with fakes of the ticket budget and the trial runner; nothing trains."""

from __future__ import annotations

import contextlib

import optuna
import pytest

from hpo.reporting import KEPT_ATTR
from hpo.runtime import _workers as workers


class _Tickets:
    def __init__(self, n: int):
        self.left = list(range(n))

    def claim(self):
        return self.left.pop(0) if self.left else None

    def pending(self) -> bool:
        return False


class _Runner:
    """Records, for each study-note write, how many trials had run by then."""

    def __init__(self):
        self.ran, self.notes = 0, []

    def __call__(self, serial, keeper) -> None:
        self.ran += 1

    def update_study_note(self) -> None:
        self.notes.append(self.ran)


@pytest.fixture
def claim_loop(monkeypatch):
    monkeypatch.setattr(workers, "recover", lambda study, tickets: None)
    monkeypatch.setattr(workers, "has_running", lambda study: False)
    monkeypatch.setattr(workers, "ClaimKeeper", lambda study, tickets, serial: contextlib.nullcontext())
    monkeypatch.setattr(workers, "liveness", lambda storage: (1, 2))
    monkeypatch.setattr(workers, "storage_of", lambda study: None)

    def run(decided: bool) -> list[int]:
        study = optuna.create_study()
        if decided:
            study.set_user_attr(KEPT_ATTR, {"kept": [], "table": "", "ranking": [], "rejected": []})
        runner = _Runner()
        assert workers._claim_and_run(study, _Tickets(3), runner, timeout=None) == 3
        return runner.notes

    return run


def test_a_probe_first_study_note_is_written_after_the_workers_first_trial(claim_loop):
    assert claim_loop(decided=True) == [1, 3]


def test_a_joint_study_note_waits_for_the_workers_end(claim_loop):
    assert claim_loop(decided=False) == [3]


def test_the_sweep_stores_its_decision_and_writes_no_note(monkeypatch):
    from hpo.config.space import parse_space
    from hpo.storage import storage_of, study_id_of
    from hpo.strategy import _probe_first as probe_first

    monkeypatch.setattr(probe_first, "sweep", lambda *args, **kwargs: [])
    monkeypatch.setattr(probe_first, "make_decision", lambda *args, **kwargs: {"kept": [{"knobs": {}}], "rejected": []})
    monkeypatch.setattr(probe_first, "decision_note", lambda decided: "decided")
    space = parse_space(
        {
            "study": {"name": "n", "strategy": "probe_first"},
            "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2},
            "params": {"lr": 1.0e-3, "batch_size": 8},
        },
        source="t",
    )
    study = optuna.create_study()
    decided = probe_first.decide(study, space, say=lambda line: None)
    assert study.user_attrs[KEPT_ATTR] == decided and decided["sweep_s"] >= 0
    attrs = storage_of(study).get_study_system_attrs(study_id_of(study))
    assert not [k for k in attrs if k.startswith("dashboard:")]  # no note yet
