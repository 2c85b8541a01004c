"""A trial over `study.memory_limit_gb` on a CPU ends `oom` in its own process, and one the kernel's
OOM killer ends is told apart from `kill -9`: both are recorded `oom` (COMPLETE, constraint
violated, implicating the knobs at the batch size) and not retried. A `kill -9` with no OOM kill
counted stays `crashed` and is retried (`test_crash_recovery.py`)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from optuna.trial import TrialState

from hpo.records import check_trial_attrs
from worker_harness import ROOT, STUDY, create_study, hpo, hpo_env, space_file, trials

CRASHY = "crashy_workloads:Crashy"


@pytest.mark.slow
def test_a_step_past_the_limit_fails_its_allocation_and_the_trial_is_oom_not_sigkilled(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    # 8 GB asked, never touched, against a 3 GB limit: the cap refuses it inside the trial process.
    space = space_file(tmp_path, n_trials=1, workload=CRASHY, misbehave="allocate", allocate_gb=8.0, memory_limit_gb=3.0)
    run = hpo("run", space, "--storage", url)
    assert run.returncode == 1, run.stderr[-3000:]  # the study ran; its one trial was rejected
    (trial,) = trials(url)  # not retried
    assert trial.state == TrialState.COMPLETE, trial.user_attrs.get("verdict")
    assert trial.user_attrs["verdict"].startswith("oom: RuntimeError: DefaultCPUAllocator: can't allocate memory")
    assert ["batch_size", 8] in trial.user_attrs["verdict_implicates"]
    assert trial.system_attrs["constraints"] == [1.0]


WORKER_WITH_A_COUNTER = """
import sys
from pathlib import Path

import hpo.runtime._child_trials as child_trials
from hpo.hardware._oom_kills import OomKillCounter
from hpo.runtime._workers import run_worker
from hpo.storage._open import open_storage
from hpo.study._create import open_hpo_study

# The kernel's count, which a test cannot raise without running a machine out of memory: a file the
# trial's workload raises before it SIGKILLs itself.
child_trials.oom_kill_counter = lambda: OomKillCounter(Path(sys.argv[3]))
study, _ = open_hpo_study(open_storage(sys.argv[1]), sys.argv[2])
print("trials run", run_worker(study, sys.argv[1]))
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_trial_process_the_oom_killer_ended_is_recorded_oom_and_not_retried(tmp_path):
    url, counter = f"sqlite:///{tmp_path / 'study.db'}", tmp_path / "memory.events"
    counter.write_text("oom_kill 0\n")
    space = space_file(tmp_path, n_trials=1, workload=CRASHY, misbehave="oom_kill", counter=str(counter))
    create_study(space, url)
    run = subprocess.run(
        [sys.executable, "-c", WORKER_WITH_A_COUNTER, url, STUDY, str(counter)],
        capture_output=True,
        text=True,
        env=hpo_env(),
        cwd=ROOT,
        timeout=200,
    )
    assert run.returncode == 0 and "trials run 1" in run.stdout, run.stderr[-3000:]
    (trial,) = trials(url)  # not retried
    assert trial.state == TrialState.COMPLETE, trial.user_attrs.get("verdict")
    assert trial.user_attrs["verdict"] == (
        f"oom: the kernel's OOM killer ended the trial process (SIGKILL; oom_kill in {counter} rose from 0 to 1 while it ran)"
    )
    assert trial.user_attrs["verdict_implicates"] == [["batch_size", 8]]
    assert trial.system_attrs["constraints"] == [1.0]
    assert "retrying" not in run.stderr
    check_trial_attrs(trial.user_attrs)
