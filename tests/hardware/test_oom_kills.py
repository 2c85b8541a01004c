"""The OOM-kill count that tells the kernel's OOM killer apart from `kill -9`: read from the
process's own memory cgroup (v2 `memory.events`, v1 `memory.oom_control`), else the machine's."""

from __future__ import annotations

import signal

from hpo.hardware import OomKillCounter, oom_kill_counter
from hpo.runtime._child_trials import crash_verdict
from hpo.runtime._killed_for_memory import killed_for_memory


def _proc(tmp_path, cgroup: str, vmstat: str = "nr_free_pages 1\noom_kill 7\n"):
    proc_self = tmp_path / "proc" / "self"
    proc_self.mkdir(parents=True)
    (proc_self / "cgroup").write_text(cgroup)
    (tmp_path / "proc" / "vmstat").write_text(vmstat)
    return proc_self


def _file(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_cgroup_v2_counter_is_read_from_memory_events(tmp_path):
    root = tmp_path / "cgroup"
    events = _file(root / "user.slice" / "w" / "memory.events", "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n")
    counter = oom_kill_counter(_proc(tmp_path, "0::/user.slice/w\n"), root)
    assert counter == OomKillCounter(events) and counter.read() == 2


def test_cgroup_v1_memory_controller_counter_is_read_from_oom_control(tmp_path):
    root = tmp_path / "cgroup"
    control = _file(root / "memory" / "jobs" / "a" / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    counter = oom_kill_counter(_proc(tmp_path, "4:memory:/jobs/a\n1:cpu:/\n0::/\n"), root)
    assert counter == OomKillCounter(control) and counter.read() == 5


def test_without_a_cgroup_counter_the_machine_count_is_read(tmp_path):
    counter = oom_kill_counter(_proc(tmp_path, "0::/\n"), tmp_path / "no-cgroup-here")
    assert counter.path.name == "vmstat" and counter.read() == 7


def test_a_sigkill_is_oom_only_when_the_count_rose_while_the_process_ran(tmp_path):
    path = _file(tmp_path / "memory.events", "oom_kill 4\n")
    counter = OomKillCounter(path)
    assert killed_for_memory(-signal.SIGKILL, counter, 4) is None  # kill -9: nothing counted
    path.write_text("oom_kill 5\n")
    verdict = killed_for_memory(-signal.SIGKILL, counter, 4)
    assert str(verdict).startswith("oom: the kernel's OOM killer ended the trial process (SIGKILL; oom_kill in ")
    assert "rose from 4 to 5 while it ran" in str(verdict)
    assert killed_for_memory(-signal.SIGSEGV, counter, 4) is None  # a segfault is no OOM kill
    assert killed_for_memory(-signal.SIGKILL, None, None) is None  # nothing to read: no claim


def test_a_sigkill_with_a_counter_that_did_not_rise_is_named_kill_9():
    assert str(crash_verdict(-signal.SIGKILL, oom_counted=True)) == (
        "crashed: trial process died (signal SIGKILL (kill -9: no OOM kill counted while it ran))"
    )
