"""A tiny 2-rank trial; faults injected into one of its ranks through the launcher's per-step hook
(module level, so the spawned ranks import them by name: `hpo.parallel.run_ranks(after_step=...)`);
and `no_rank_left_behind`, the check that a test leaves no rank process alive and no port bound,
which a test module imports to use."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from hpo.config.resolve import fixed_config
from hpo.config.space import parse_space
from hpo.config.trial import TrialConfig


def two_rank_config(strategy: str = "ddp", precision: str = "fp32", max_steps: int = 4, **parallel) -> TrialConfig:
    """A 2-layer causal LM small enough that its ranks' start (importing torch) is most of the time."""
    raw = {
        "workload": {
            "name": "causal_lm",
            "max_steps": max_steps,
            "d_model": 16,
            "n_layers": 2,
            "n_heads": 2,
            "seq_len": 16,
            "corpus_bytes": 20000,
        },
        "params": {"batch_size": 8, "lr": 1e-3},
        "systems": {
            "precision": precision,
            "attention": "eager",
            "optimizer": "forloop",
            "compile": False,
            "device": "cpu",
            "parallel": {"processes": 2, "strategy": strategy, "collective_timeout_s": 60, **parallel},
        },
    }
    return fixed_config(parse_space(raw, "two_rank_config"))


# The rank and the step after which each fault strikes: its peer is then inside the next step.
FAULTY_RANK, FAULTY_STEP = 1, 1


def kill_rank_mid_run(rank: int, step: int) -> None:
    if (rank, step) == (FAULTY_RANK, FAULTY_STEP):
        os.kill(os.getpid(), signal.SIGKILL)


def hang_rank(rank: int, step: int) -> None:
    """The rank stops answering (as one stuck in a kernel or a deadlock): its peer's next gradient
    all-reduce waits for it until the group's collective timeout."""
    if (rank, step) == (FAULTY_RANK, FAULTY_STEP):
        time.sleep(3600)


def stall_every_rank(rank: int, step: int) -> None:
    """Every rank marks that it trains (a file under $HPO_TEST_RANK_MARKS), then stalls deaf to
    SIGINT and SIGTERM, as a rank stuck in C++ code (a collective, a kernel) runs no Python handler."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.path.join(os.environ["HPO_TEST_RANK_MARKS"], f"rank{rank}"), "w") as mark:
        mark.write(str(os.getpid()))
    time.sleep(3600)


def _listening_ports(process: psutil.Process) -> set[int]:
    return {c.laddr.port for c in process.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}


def _is_rank(process: psutil.Process) -> bool:
    """Alive and not multiprocessing's resource tracker, which the first spawn starts once for the
    whole pytest process and which ends with it."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(autouse=True)
def no_rank_left_behind():
    """After the test: every process it started has ended, and it left no port listening."""
    me = psutil.Process()
    children, ports = {p.pid for p in me.children(recursive=True)}, _listening_ports(me)
    yield
    left = [p for p in me.children(recursive=True) if p.pid not in children and _is_rank(p)]
    assert not left, f"rank processes left running: {[(p.pid, p.cmdline()[:3]) for p in left]}"
    bound = _listening_ports(me) - ports
    assert not bound, f"ports left listening: {sorted(bound)}"
