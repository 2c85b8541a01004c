"""The toy workload, made to misbehave on purpose for the crash-recovery tests:
`crashy_workloads:Crashy` (subprocesses need `PYTHONPATH=tests:tests/workers`).

At its `at_call`-th loss computation (the knob probe's steps count) the trial process sends itself
`signal` (a segfault, a kill -9 as from the OOM killer) or hangs for `hang_s` so that a test can
kill its worker mid-trial; `raise` raises from `evaluate`, where no knob probe catches it.
`allocate` asks torch for `allocate_gb` at every loss computation (never touched, so no RAM is used
where nothing caps it). `oom_kill` adds one to the `oom_kill` line of the file `counter` (a stand-in
for the kernel's count, which the test hands its worker), then SIGKILLs itself as the kernel's OOM
killer would. With `once` set to a file path it misbehaves only while that file does not exist and
creates it, so the retry of the trial succeeds.
"""

from __future__ import annotations

import os
import signal as signals
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from toy_workloads import Toy, ToyOptions


@dataclass(frozen=True, kw_only=True)
class CrashyOptions(ToyOptions):
    misbehave: str = "none"  # none | signal | raise | hang | allocate | oom_kill
    signal: str = "SIGSEGV"
    at_call: int = 0
    hang_s: float = 120.0
    once: str = ""
    allocate_gb: float = 8.0
    counter: str = ""


class Crashy(Toy):
    Options = CrashyOptions

    def __init__(self, options: CrashyOptions):
        super().__init__(options)
        self.calls = 0

    def training_loss(self, model, batch):
        if self.options.misbehave == "allocate":
            torch.empty(int(self.options.allocate_gb * 2**30), dtype=torch.uint8)
        if self.options.misbehave in ("signal", "hang", "oom_kill") and self.calls == self.options.at_call and self._armed():
            self._misbehave()
        self.calls += 1
        return super().training_loss(model, batch)

    def evaluate(self, model, move):
        if self.options.misbehave == "raise" and self._armed():
            raise ValueError("crashy workload raised on purpose")
        return super().evaluate(model, move)

    def _armed(self) -> bool:
        if self.options.misbehave == "none":
            return False
        if not self.options.once:
            return True
        try:
            # Exclusive create is atomic: one trial process misbehaves, even with several workers.
            with open(self.options.once, "x") as marker:
                marker.write(str(os.getpid()))  # tells the test which process misbehaves
        except FileExistsError:
            return False
        return True

    def _misbehave(self) -> None:
        if self.options.misbehave == "oom_kill":
            kills = int(Path(self.options.counter).read_text().split()[1])
            Path(self.options.counter).write_text(f"oom_kill {kills + 1}\n")
            os.kill(os.getpid(), signals.SIGKILL)
            time.sleep(10)
        if self.options.misbehave == "signal":
            os.kill(os.getpid(), getattr(signals, self.options.signal))
            time.sleep(10)  # the signal is delivered asynchronously
        if self.options.misbehave == "hang":
            time.sleep(self.options.hang_s)
