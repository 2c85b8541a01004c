"""The check that each test leaves no rank process alive
and no port bound behind it."""

from __future__ import annotations

import psutil
import pytest


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
