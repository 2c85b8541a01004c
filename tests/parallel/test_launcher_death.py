"""A launcher killed outright (as a worker ends a trial past trial_timeout_s, with SIGKILL) takes
its ranks with it: no rank trains on as an orphan."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from parallel_ranks import no_rank_left_behind  # noqa: F401 (autouse)

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = (
    "from parallel_ranks import stall_every_rank, two_rank_config\n"
    "from hpo.parallel import run_ranks\n"
    "if __name__ == '__main__':\n"
    "    run_ranks(two_rank_config(), after_step=stall_every_rank, deadline_s=600)\n"
)


def wait_for(condition, what: str, limit_s: float = 240) -> None:
    """Poll a condition with a generous limit: the test is about whether it happens, not how fast."""
    end = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < end, f"{what} did not happen within {limit_s} s"
        time.sleep(0.2)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
def test_ranks_die_with_a_launcher_killed_by_sigkill(tmp_path):
    (tmp_path / "launch.py").write_text(LAUNCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), HPO_TEST_RANK_MARKS=str(tmp_path))
    launcher = subprocess.Popen([sys.executable, str(tmp_path / "launch.py")], env=env, cwd=tmp_path)
    try:
        marks = [tmp_path / "rank0", tmp_path / "rank1"]
        wait_for(lambda: all(m.exists() and m.read_text() for m in marks), "both ranks training")
        ranks = [int(m.read_text()) for m in marks]
        assert not any(gone(pid) for pid in ranks)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        wait_for(lambda: all(gone(pid) for pid in ranks), "the ranks ending with their launcher")
    finally:
        launcher.kill()
        launcher.wait()
