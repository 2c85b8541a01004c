"""How many processes the kernel's OOM killer has ended: the evidence that tells a trial process
it killed apart from one ended by `kill -9` (both die of SIGKILL).

The most local counter this process can read is used: its own memory cgroup's (cgroup v2
`memory.events`, v1 `memory.oom_control`: `oom_kill`, counted in the victim's cgroup, whichever
limit ran out), else the machine's (`/proc/vmstat`, Linux 4.13 on). A trial process is forked into
its worker's cgroup, so a rise in the count while it ran, and its SIGKILL, are read together. The
count is not per process: another process of the same cgroup (or, from /proc/vmstat, of the
machine) killed for memory in the same seconds as a `kill -9` of the trial would read as one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["OomKillCounter", "oom_kill_counter"]

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class OomKillCounter:
    """A file whose `oom_kill` line counts the OOM killer's victims."""

    path: Path

    def read(self) -> int | None:
        """The count now; None when it cannot be read (the cgroup went away)."""
        try:
            for line in self.path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            return None
        return None


def oom_kill_counter(proc_self: Path = Path("/proc/self"), root: Path = CGROUP_ROOT) -> OomKillCounter | None:
    """This process's most local OOM-kill counter; None where there is none (not Linux)."""
    for candidate in _cgroup_counters(proc_self / "cgroup", root):
        if OomKillCounter(candidate).read() is not None:
            return OomKillCounter(candidate)
    machine = OomKillCounter(proc_self.parent / "vmstat")
    return machine if machine.read() is not None else None


def _cgroup_counters(cgroup_file: Path, root: Path) -> list[Path]:
    """The counters of this process's memory cgroup: v2's (mounted at the root, or at `unified`
    beside a v1 hierarchy) and v1's memory controller's, those that exist."""
    try:
        lines = cgroup_file.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            found += [root / relative / "memory.events", root / "unified" / relative / "memory.events"]
        elif "memory" in controllers.split(","):
            found.append(root / "memory" / relative / "memory.oom_control")
    return found
