"""How a worker watches the trial process it started (`hpo.runtime._child_trials`): it relays the
process's messages and polls, never waiting on it without a limit, and says when to end it."""

from __future__ import annotations

import time
from collections.abc import Callable

from hpo.reporting import report
from hpo.runtime._ticket_claims import StartHeartbeat
from hpo.runtime._trial_timeout import timeout_verdict
from hpo.verdicts import Kind, Verdict

__all__ = ["STARTUP_LIMIT_S", "ChildWatch"]

# A trial process starts its trial within seconds (it is forked ready to run); one that has not after
# this long is stuck, and is ended like a process that died before its trial started.
STARTUP_LIMIT_S = 300


class ChildWatch:
    """Relay the trial process's messages until it exits, or until it is to be ended: it outlived
    its limit, or its trial ended without it. The first message says it took its trial: from then
    on its heartbeats keep the trial alive. `trial_ended` asks the storage whether the trial is
    still running (failing stale trials first)."""

    def __init__(self, limit_s: float | None, interval_s: float, grace_s: float, trial_ended: Callable[[], bool]) -> None:
        self.limit_s, self.interval_s, self.grace_s, self.trial_ended = limit_s, interval_s, grace_s, trial_ended
        self.taken, self.started, self.checked, self.ended_at = False, time.monotonic(), time.monotonic(), None

    def watch(self, conn, heartbeat: StartHeartbeat) -> tuple[bool, Verdict | None, bool]:
        """Whether the process took its trial, the verdict to record (its limit outlived) and
        whether it exited (True), or is to be ended (False)."""
        wait_s = self.interval_s if self.limit_s is None else min(self.interval_s, self.limit_s)
        while True:
            to_end = self._to_end(time.monotonic())
            if to_end is not None:
                return to_end
            if not conn.poll(wait_s):
                continue
            try:
                message = conn.recv()
            except EOFError:  # the child is exiting
                return self.taken, None, True
            self._received(message, heartbeat)

    def _to_end(self, now: float) -> tuple[bool, Verdict | None, bool] | None:
        """What `watch` returns when the process is to be ended now, else None."""
        if not self.taken and now - self.started > STARTUP_LIMIT_S:
            return False, Verdict(Kind.CRASHED, f"trial process had not started its trial after {STARTUP_LIMIT_S} s"), False
        if self.taken and self.limit_s is not None and now - self.started > self.limit_s:
            return True, timeout_verdict(self.limit_s, now - self.started), False
        if self.taken and now - self.checked >= self.grace_s:  # a few queries: not every heartbeat
            self.checked = now
            self.ended_at = self.ended_at or (now if self.trial_ended() else None)
            if self.ended_at is not None and now - self.ended_at > self.grace_s:
                return True, None, False  # it failed stale, or it finished and its process hangs on exit
        return None

    def _received(self, message, heartbeat: StartHeartbeat) -> None:
        if not self.taken:  # the trial's id: the process runs it, and beats for it from now on
            self.taken, self.started, self.checked = True, time.monotonic(), time.monotonic()
            heartbeat.stop()
        else:
            report(message)  # the child's progress, on this worker's display
