"""Progress: a live bar on a terminal, relayed from the trial processes; plain lines otherwise."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from worker_harness import hpo, hpo_env, space_file


def _run_on_a_terminal(args: list[str]) -> tuple[int, str]:
    """Run with stderr on a pseudo-terminal (so tqdm draws), stdout on a pipe; return the screen text."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))  # a new pty is 0x0
    proc = subprocess.Popen([sys.executable, "-m", "hpo.app.cli", *args], env=hpo_env(), stdout=subprocess.PIPE, stderr=terminal)
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=240)
    os.close(controller)
    return proc.returncode, b"".join(chunks).decode(errors="replace")


def test_a_terminal_gets_a_live_bar_fed_by_the_trial_processes(tmp_path):
    space = space_file(tmp_path, n_trials=3)
    code, screen = _run_on_a_terminal(["run", str(space), "--storage", f"sqlite:///{tmp_path / 's.db'}"])
    assert code == 0, screen[-2000:]
    assert "3/3" in screen and ("trial/s" in screen or "s/trial" in screen)  # tqdm's counter and rate
    assert "best " in screen  # the best value so far, on the bar
    assert "trial 2 step 2/2 val_" in screen  # an evaluation relayed from the trial process
    assert "trial #2 (3 of 3) complete [ok]" in screen  # finished trials are written above the bar


@pytest.mark.slow
def test_without_a_terminal_each_event_is_one_line(tmp_path):
    run = hpo("run", space_file(tmp_path, n_trials=2), "--storage", f"sqlite:///{tmp_path / 's.db'}")
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stderr.splitlines()
    assert any(line.startswith("  trial 1 step 2/2 val_") for line in lines)
    assert any(line.startswith("trial #1 (2 of 2) complete [ok]") and "elapsed" in line for line in lines)
    assert "\r" not in run.stderr  # no bar redraws in a log
