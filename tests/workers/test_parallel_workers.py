"""Two `hpo worker` processes share one PostgreSQL study whose trials each run as 2 ranks: together
they run exactly the study's budget, every trial's record shows that both of its ranks trained, and
once the workers end no process they started is left and no port they listened on stays bound. A
worker stopped by SIGTERM in the middle of such a trial leaves neither."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from optuna.trial import TrialState
from parallel_ranks import assert_two_ranks_trained, two_rank_space
from space_files import write_space

from hpo.errors import ExitCode
from hpo.records import check_trial_attrs
from hpo.storage._open import GRACE_PERIOD_S
from worker_harness import ROOT, STUDY, alive, create_study, descendants, hpo_env, kill_group, tickets, trials, wait_for

N_TRIALS, MAX_STEPS = 4, 3
SPACE = two_rank_space(STUDY, N_TRIALS, MAX_STEPS)
SPACE["study"]["skip_slow"] = False


def _start_worker(url: str, log: Path) -> subprocess.Popen:
    """`hpo worker` in its own session (so a failed test can kill its whole group), with the
    product's grace period: two trials of two ranks each share 2 cores, and a trial whose heartbeat
    came late under that load must not be failed as stale and retried, past the budget."""
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "hpo.app.cli", "worker", "--study", STUDY],
            env=hpo_env(HPO_STORAGE=url, HPO_GRACE_PERIOD=str(GRACE_PERIOD_S)),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )


def _listening_ports(pids: set[int]) -> set[int]:
    ports = set()
    for pid in pids:
        try:
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        ports |= {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}
    return ports


def _still_listening(ports: set[int]) -> set[int]:
    """Those of `ports` some process on this host still listens on."""
    return {c.laddr.port for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN} & ports


def _ranks_among(pids: set[int]) -> set[int]:
    """The processes `torch.multiprocessing` spawned (a rank's command line runs multiprocessing's spawn_main)."""
    found = set()
    for pid in pids:
        try:
            if "spawn_main" in " ".join(psutil.Process(pid).cmdline()):
                found.add(pid)
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.mark.slow
def test_two_workers_run_the_exact_budget_of_two_rank_trials_on_postgres(postgres_url, tmp_path):
    create_study(write_space(tmp_path / "space.yaml", SPACE), postgres_url)
    workers = [_start_worker(postgres_url, tmp_path / f"worker{i}.log") for i in range(2)]
    seen, ranks, ports = set(), set(), set()
    try:
        deadline = time.monotonic() + 900
        while any(w.poll() is None for w in workers):
            assert time.monotonic() < deadline, "the workers did not finish the study within 900 s"
            below = set().union(*(descendants(w.pid) for w in workers))
            seen |= below
            ranks |= _ranks_among(below - ranks)
            ports |= _listening_ports(below)
            time.sleep(0.3)
    finally:
        for worker in workers:
            if worker.poll() is None:
                kill_group(worker)
    logs = [(tmp_path / f"worker{i}.log").read_text()[-3000:] for i in range(2)]
    assert [w.returncode for w in workers] == [0, 0], logs

    found = trials(postgres_url)
    assert [t.state for t in found] == [TrialState.COMPLETE] * N_TRIALS, [t.state.name for t in found]
    assert tickets(postgres_url) == ((N_TRIALS, N_TRIALS), 0)
    assert len({t.user_attrs["worker"] for t in found}) == 2, "both workers should have run trials"
    for trial in found:
        check_trial_attrs(trial.user_attrs)
        assert_two_ranks_trained(trial.user_attrs["parallel"], SPACE)

    assert len(ranks) >= 2, "the test should have seen the trials' rank processes"
    # A worker's forkserver ends with it (PR_SET_PDEATHSIG), a moment after the worker's own exit.
    wait_for(lambda: not alive(seen), 60, f"the processes the workers started to end (left: {sorted(alive(seen))})")
    assert ports, "the test should have seen the rendezvous store listen"
    assert not _still_listening(ports), f"ports still bound: {sorted(_still_listening(ports))}"


def _ranks_in_group(pid: int) -> set[int] | None:
    """The two ranks below `pid` once both joined their group (each listens on gloo's port for its peer)."""
    found = _ranks_among(descendants(pid))
    return found if len(found) == 2 and all(_listening_ports({rank}) for rank in found) else None


@pytest.mark.slow
def test_sigterm_to_a_worker_mid_trial_stops_both_ranks_and_frees_their_ports(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    space = two_rank_space(STUDY, n_trials=1, max_steps=10**6)  # trains until it is stopped
    create_study(write_space(tmp_path / "space.yaml", space), url)
    worker = _start_worker(url, tmp_path / "worker.log")
    try:
        ranks = wait_for(lambda: _ranks_in_group(worker.pid), 300, "both ranks of the trial to join their group")
        seen = descendants(worker.pid)
        ports = _listening_ports(seen)
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=120)
    finally:
        if worker.poll() is None:
            kill_group(worker)
    assert worker.returncode == ExitCode.TERMINATED, (tmp_path / "worker.log").read_text()[-3000:]
    assert ranks <= seen
    wait_for(lambda: not alive(seen), 60, f"the worker's processes to end (left: {sorted(alive(seen))})")
    assert not _still_listening(ports), f"ports still bound: {sorted(_still_listening(ports))}"
    (stopped,) = [t for t in trials(url) if t.state == TrialState.FAIL]
    assert stopped.user_attrs["verdict"] == "terminated: its worker was stopped by SIGTERM"
    assert [t.state for t in trials(url)].count(TrialState.WAITING) == 1  # its retry, as for any trial
