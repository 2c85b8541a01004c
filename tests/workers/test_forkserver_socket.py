"""The forkserver starts, and its trial processes run, under a TMPDIR too long for a Unix socket
path: only multiprocessing's socket folder moves to a short folder, hpo's own files stay under TMPDIR."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# In a fresh interpreter: multiprocessing creates its socket folder once a process.
START = """
import multiprocessing.util, os, sys, tempfile
from hpo.config.space import parse_space
from hpo.runtime._forkserver import start_forkserver
space = parse_space({
    "study": {"name": "long-tmpdir"},
    "workload": {"name": "causal_lm", "d_model": 32, "n_layers": 1, "seq_len": 16, "max_steps": 2},
    "params": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, "batch_size": 4},
    "systems": {"precision": "fp32", "attention": "eager", "optimizer": "fused"},
}, source="test")
context = start_forkserver(space, "sqlite:///" + sys.argv[1])
child = context.Process(target=os.getpid)
child.start()
child.join(120)
print(child.exitcode, multiprocessing.util.get_temp_dir(), tempfile.gettempdir(), sep="\\n")
"""


def _long_tmpdir(tmp_path):
    """A folder of at least 120 characters: a socket path under it would pass Linux's 108 bytes."""
    tmpdir = tmp_path / ("t" * max(1, 120 - len(str(tmp_path)) - 1))
    tmpdir.mkdir()
    return tmpdir


@pytest.mark.slow
def test_the_forkserver_starts_and_forks_under_a_tmpdir_too_long_for_a_socket_path(tmp_path):
    tmpdir = _long_tmpdir(tmp_path)
    env = dict(os.environ, TMPDIR=str(tmpdir), OMP_NUM_THREADS="2")
    done = subprocess.run(
        [sys.executable, "-c", START, str(tmp_path / "study.db")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    exitcode, socket_folder, temp = done.stdout.split()
    assert exitcode == "0"  # a trial process forked from the forkserver ran
    assert len(socket_folder) + len("/listener-XXXXXXXX") <= 104 and not socket_folder.startswith(str(tmpdir))
    assert temp == str(tmpdir)  # hpo's own temporary files still go under the user's TMPDIR


# No short folder to move to: the error states the rule and the fix, before any forkserver starts.
NOWHERE = """
import hpo.runtime._forkserver as forkserver
forkserver._SHORT_FOLDERS = ()
forkserver.short_socket_folder()
"""


def test_a_tmpdir_too_long_with_no_short_folder_to_move_to_is_bad_input_that_says_the_fix(tmp_path):
    tmpdir = _long_tmpdir(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", NOWHERE], env=dict(os.environ, TMPDIR=str(tmpdir)), capture_output=True, text=True, timeout=120
    )
    assert "UserInputError: the forkserver's socket path must fit 104 bytes" in done.stderr
    assert "set TMPDIR to a shorter folder" in done.stderr
