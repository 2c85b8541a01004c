"""Stopping a timed step once it has run longer than a bound, for timings that only need to know
whether a step is over a limit (`hpo.verify.timing._slow_proof`): a bf16 MiniLM step on a CPU without
avx512_bf16 takes 17 s, and proving it over 5x the 1.1 s fp32 one needs 5.5 s of it, not 17.

A step's time is at least the time already spent in it, so a step stopped at a module's forward or
at a parameter's gradient, past the deadline, is known to take longer than the bound: a lower
bound, never a step time. On a GPU the host may run ahead of the device, so a stop comes later or
not at all (the step then completes and is timed as usual); the bound still holds, since a step
ends only after its host side has.

The checks are module forward pre-hooks and parameter gradient hooks: neither changes what the
step computes (a full backward hook would wrap the modules' outputs). A compiled model is never
stopped: Dynamo would trace the hooks into its graph.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["Outlasted", "StepDeadline", "deadline_for"]


class Outlasted(Exception):
    """A step stopped past its deadline."""


class StepDeadline:
    """Hooks on a model that stop its step once `bound_ms` have passed since `armed`'s start."""

    def __init__(self, model: torch.nn.Module, bound_ms: float) -> None:
        self.bound_s = bound_ms / 1000
        self._model = model
        self._until: float | None = None
        self._handles = [m.register_forward_pre_hook(self._check) for m in model.modules()]
        self._handles += [p.register_hook(self._check_grad) for p in model.parameters() if p.requires_grad]

    def _check(self, *_) -> None:
        if self._until is not None and time.perf_counter() > self._until:
            self._until = None  # one stop a step: the unwinding runs no more checks
            raise Outlasted

    def _check_grad(self, grad: torch.Tensor) -> None:
        self._check()

    @contextmanager
    def armed(self, start: float) -> Iterator[None]:
        """The step run inside stops once the bound has passed since `start` (a perf_counter)."""
        self._until = start + self.bound_s
        try:
            yield
        except Outlasted:
            self._model.zero_grad(set_to_none=True)  # a stopped backward left some of its gradients
            raise
        finally:
            self._until = None

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


@contextmanager
def deadline_for(model: torch.nn.Module, bound_ms: float | None, compiled: bool) -> Iterator[StepDeadline | None]:
    """A StepDeadline on `model` for the block, or None when there is no bound or the model is
    compiled."""
    if bound_ms is None or compiled:
        yield None
        return
    deadline = StepDeadline(model, bound_ms)
    try:
        yield deadline
    finally:
        deadline.remove()
