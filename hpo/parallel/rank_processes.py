"""The ranks' processes, watched to their end: the exit codes of those that failed, once the
others had a moment to write their own error; then every one stopped and joined."""

from __future__ import annotations

import multiprocessing.connection
import time

from hpo.parallel.faults import RankExits

__all__ = ["stop_ranks", "watch_ranks"]

_STOP_GRACE_S = 5.0  # a rank stopped with SIGTERM gets this long before SIGKILL
_ECHO_GRACE_S = 2.0  # once a rank failed, the others' time to end and write their own error


def watch_ranks(processes: list, deadline_s: float | None, collective_timeout_s: float) -> RankExits:
    """Wait until every rank ended well, one failed, or the deadline passed; the exit codes are
    those of the ranks that had ended by then, before any was stopped here."""
    sentinels = {p.sentinel: rank for rank, p in enumerate(processes)}
    end = None if deadline_s is None else time.monotonic() + deadline_s
    while True:
        left = None if end is None else max(0.0, end - time.monotonic())
        multiprocessing.connection.wait(list(sentinels), timeout=left)
        exits = {rank: p.exitcode for rank, p in enumerate(processes) if p.exitcode is not None}
        failed = {rank: code for rank, code in exits.items() if code != 0}
        if failed and len(exits) < len(processes):
            failed = _after_echo_grace(processes, sentinels)
        if failed or len(exits) == len(processes):
            return RankExits(len(processes), collective_timeout_s, exits=failed)
        if end is not None and time.monotonic() >= end:
            return RankExits(len(processes), collective_timeout_s, deadline_s=deadline_s)


def _after_echo_grace(processes: list, sentinels: dict) -> dict[int, int]:
    """The failed ranks' exit codes once the others had _ECHO_GRACE_S to end on their own: a rank
    that found the fault (a mismatch) may still be writing its error when a peer it left dies
    (seen in CI: rank 1 SIGABRT in gloo before rank 0 wrote its mismatch, recorded `crashed`)."""
    end = time.monotonic() + _ECHO_GRACE_S
    running = [s for s, rank in sentinels.items() if processes[rank].exitcode is None]
    while running and time.monotonic() < end:
        multiprocessing.connection.wait(running, timeout=max(0.0, end - time.monotonic()))
        running = [s for s in running if processes[sentinels[s]].exitcode is None]
    return {rank: p.exitcode for rank, p in enumerate(processes) if p.exitcode not in (None, 0)}


def stop_ranks(processes: list) -> list[int]:
    """Every rank's process ended and joined: SIGTERM, a grace period, then SIGKILL. Returns the
    ranks that were still running."""
    running = [rank for rank, process in enumerate(processes) if process.is_alive()]
    for rank in running:
        processes[rank].terminate()
    end = time.monotonic() + _STOP_GRACE_S
    for process in processes:
        process.join(max(0.0, end - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()
    return running
