"""What `bench-vs-bare` measures on both sides, from outside either loop: a workload that times
each batch drawn and samples memory after each forward.

hpo's loop and the hand-written loop call the same two workload methods every step
(`train_batches` for the next batch, `training_loss` for the forward), so a subclass of the workload
that records a timestamp at each draw and memory after each forward measures both loops the same
way, whatever either does between those calls (syncs, checks, profiling). Each iterator drawn from
is a window (the probe's, the training loop's, the FLOP count's); the training window is the one
with the most draws. Throughput is the samples drawn per second between the `warmup`-th draw and
the last one: on a GPU each draw waits for the step before it only as much as the loop makes it
wait, so a loop that syncs every step shows it.

Memory follows `hpo.hardware.MemoryMeter`'s semantics, per window: on CUDA the allocator's
peak (reset when a window opens, read when it closes), on CPU the resident set after each forward,
when the activations are alive. The loss of each window's last training step is kept as a device
tensor (no sync) and read at the end, so the two sides can be checked to have trained the same thing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from hpo.errors import UserInputError
from hpo.hardware import resident_bytes
from hpo.workloads.causal_lm import CausalLM

__all__ = ["METER", "TIMED_WORKLOADS", "StepMeter", "TimedCausalLM", "Window", "timed_workload_name"]


@dataclass
class Window:
    """One iterator's draws: when each batch was drawn, its samples, the memory peak, the last loss."""

    draws: list[float] = field(default_factory=list)
    cpu_draws: list[float] = field(default_factory=list)  # the process's CPU time at each draw
    samples: list[int] = field(default_factory=list)
    peak_bytes: int = 0
    last_loss: torch.Tensor | None = None

    def samples_per_s(self, warmup: int) -> float | None:
        """Samples per second between draw `warmup` and the last draw (the steps in between, each
        from one draw to the next); None when fewer than two draws are past the warm-up."""
        if len(self.draws) < warmup + 2:
            return None
        return sum(self.samples[warmup:-1]) / (self.draws[-1] - self.draws[warmup])

    def samples_per_cpu_s(self, warmup: int) -> float | None:
        """The same samples per second of this process's CPU time (all its threads): on a CPU shared
        with other work, what a step costs rather than how long it waited for a core."""
        if len(self.cpu_draws) < warmup + 2:
            return None
        return sum(self.samples[warmup:-1]) / (self.cpu_draws[-1] - self.cpu_draws[warmup])


class StepMeter:
    """The windows of one process (each benchmark side runs in a process of its own)."""

    def __init__(self) -> None:
        self.windows: list[Window] = []
        # The process's memory when the first model build began: what the interpreter and the
        # imports hold (resident set), and what CUDA had allocated.
        self.base_rss_bytes: int | None = None
        self.base_cuda_bytes = 0

    def before_build(self) -> None:
        if self.base_rss_bytes is None:
            self.base_rss_bytes = resident_bytes()
            self.base_cuda_bytes = torch.cuda.memory_allocated() if _cuda_in_use() else 0

    def open(self) -> Window:
        self._close_current()
        if _cuda_in_use():
            torch.cuda.reset_peak_memory_stats()
        window = Window()
        self.windows.append(window)
        return window

    def drew(self, window: Window, samples: int) -> None:
        window.draws.append(time.perf_counter())
        window.cpu_draws.append(time.process_time())
        window.samples.append(samples)

    def forward_done(self, window: Window | None, loss: torch.Tensor) -> None:
        """After a training forward: the loss (detached, on the device) and, on CPU, the resident set."""
        if window is None or not torch.is_grad_enabled():  # evaluation, or a loss outside a window
            return
        window.last_loss = loss.detach()
        if loss.device.type != "cuda":
            window.peak_bytes = max(window.peak_bytes, resident_bytes())

    def finish(self) -> None:
        self._close_current()

    def training_window(self) -> Window:
        if not self.windows:
            raise RuntimeError("no batch was drawn: the loop never trained")
        return max(reversed(self.windows), key=lambda w: len(w.draws))  # most draws; the later on a tie

    def _close_current(self) -> None:
        if self.windows and _cuda_in_use():
            current = self.windows[-1]
            current.peak_bytes = max(current.peak_bytes, torch.cuda.max_memory_allocated())


def _cuda_in_use() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


METER = StepMeter()


class TimedCausalLM(CausalLM):
    """hpo's causal_lm, its model and data unchanged, measured by METER."""

    _window: Window | None = None

    def build_model(self, attention: str) -> torch.nn.Module:
        METER.before_build()
        return super().build_model(attention)

    def train_batches(self, batch_size: int, seed: int) -> Iterator[dict[str, torch.Tensor]]:
        window = None
        for batch in super().train_batches(batch_size, seed):
            window = window or METER.open()  # at the first draw: generators start lazily
            METER.drew(window, self.samples_in(batch))
            self._window = window
            yield batch

    def training_loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        loss = super().training_loss(model, batch)
        METER.forward_done(self._window, loss)
        return loss


# Built-in workload -> its timed twin, as a config names it (hpo imports `package.module:Class`).
TIMED_WORKLOADS = {"causal_lm": "benchmarks.vs_bare_meter:TimedCausalLM"}


def timed_workload_name(workload: str) -> str:
    if workload not in TIMED_WORKLOADS:
        raise UserInputError(
            f"workload.name: bench-vs-bare times {sorted(TIMED_WORKLOADS)}, got {workload!r}; "
            "add its timed twin to benchmarks/vs_bare_meter.py"
        )
    return TIMED_WORKLOADS[workload]
