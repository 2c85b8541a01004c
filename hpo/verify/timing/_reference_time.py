"""The fp32/eager/for-loop reference's step time, which the slow check divides a trial's step by.

It is measured once per model, batch size and device (the verdict store keeps it), at the trial's
batch size, as the fastest of the steps timed. Only steady steps count towards ending the timing,
and a cold step is not steady:
- On CPU the first full-batch steps fault their memory in. MiniLM at batch 16: 65 and 41 thousand
  page faults in steps one and two, none from the third; 731 and 720 ms against 546 and 554 ms.
  So the memory is touched before the first step (`prefault_heap`, sized from the compared step by
  `full_step_bytes`), and a step that still spent over STEADY_FAULT_SHARE of its time faulting
  pages in is not steady. After the prefault MiniLM's first step took 535-542 ms against 515-527 ms
  for steps two to four, and the causal_lm model's 67-68 ms against 61 ms (2026-11-24, 2-core EPYC).
- Where freed memory is not kept (not glibc), and on CUDA, whose first step initialises cuBLAS and
  the caching allocator, which no page fault shows, the first step is never steady.

Steps are timed until a steady one has run and MIN_TIMED_S have been timed, at most MAX_STEPS: one
MiniLM step is enough, a 60 ms step is cheap to repeat and one scheduling delay would move it more.
Any excess left makes the reference slower, so trials read faster and the check errs towards passing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from hpo.engine import AssembledModel
from hpo.hardware import Prefault, page_faults, prefault_heap, synchronize
from hpo.verify.timing._steady import timed_step
from hpo.workloads.base import Batch

__all__ = ["ReferenceTiming", "full_step_bytes", "time_reference", "time_until_steady"]

MIN_TIMED_S = 0.2
MAX_STEPS = 5
STEADY_FAULT_SHARE = 0.03
# The prefault's size over the estimate: an estimate short of the step's need leaves faults in
# the step (then timed again); one over it costs 1-4 us a page here (0.13-0.56 s for 450-550 MB).
PREFAULT_MARGIN = 1.5
# Fewer faults than this in the prefault (its memory was resident already) measure no fault's cost.
MIN_MEASURED_FAULTS = 1000
ADAMW_STATE_TENSORS = 2  # exp_avg and exp_avg_sq per parameter: the reference's optimizer is AdamW


@dataclass(frozen=True)
class ReferenceTiming:
    steps_ms: tuple[float, ...]
    steps_faults: tuple[int, ...]  # each timed step's page faults: how steady it ran
    prefault: Prefault | None  # None: nothing was touched beforehand (see the module docstring)
    timed_at: float  # wall-clock time (epoch seconds) when the timing ended: a later trial's ratio spans the gap

    @property
    def step_ms(self) -> float:
        return min(self.steps_ms)

    def record(self) -> dict:
        """The verdict store's record of the reference (`reference_key`)."""
        return {
            "step_ms": self.step_ms,
            "timed_steps_ms": list(self.steps_ms),
            "timed_steps_faults": list(self.steps_faults),
            "prefault_mb": None if self.prefault is None else self.prefault.nbytes / 2**20,
            "prefault_s": None if self.prefault is None else self.prefault.seconds,
            "timed_at": self.timed_at,
        }


def full_step_bytes(param_bytes: int, compared_growth: int, batch_size: int, compared_size: int) -> int:
    """Memory a full-batch step allocates beyond what the compared step left resident: the
    optimizer's state, and the activations of the samples the compared step did not have (its
    growth less the gradients it created, per sample), with PREFAULT_MARGIN."""
    activations_per_sample = max(compared_growth - param_bytes, 0) / compared_size
    need = ADAMW_STATE_TENSORS * param_bytes + (batch_size - compared_size) * activations_per_sample
    return int(PREFAULT_MARGIN * need)


def time_reference(reference: AssembledModel, batch: Batch, compared_growth: int, compared_size: int) -> ReferenceTiming:
    """Time the reference's full-batch steps; `compared_growth` is the resident memory its compared
    step (on `compared_size` samples) added."""
    prefault = _prefaulted(reference, compared_growth, reference.workload.samples_in(batch), compared_size)
    moved = reference.move(batch)
    # No untimed step first, unlike `hpo.verify.timing._steady`'s policy for trials: the rule that ends this
    # timing already keeps a cold first step from being the one it stops on. Where the prefault
    # measured its faults, a step that faulted memory in is not steady; elsewhere (CUDA, whose first
    # step initialises cuBLAS and the allocator) the first step never is. An untimed step on top cost
    # the study's first probe one full reference step (0.16 of 0.77 s, the default causal_lm model at
    # batch 32 on a 2-core EPYC, 2026-11-26). What a steady first step may still carry (the
    # optimizer's state, created on it) only makes the reference slower: the check errs towards
    # passing, and no `slow` verdict is given before `hpo.verify.timing._slow_proof` times both sides again.
    timed = time_until_steady(_step_timer(reference, moved), _steadiness(prefault))
    return ReferenceTiming(
        steps_ms=tuple(1000 * seconds for seconds, _ in timed),
        steps_faults=tuple(faults for _, faults in timed),
        prefault=prefault,
        timed_at=time.time(),
    )


def _prefaulted(reference: AssembledModel, compared_growth: int, batch_size: int, compared_size: int) -> Prefault | None:
    """On a CPU, the memory a full-batch step of the reference touches, faulted in before it is
    timed (`prefault_heap`); None elsewhere."""
    if reference.device.type != "cpu":
        return None
    param_bytes = sum(p.numel() * p.element_size() for p in reference.model.parameters() if p.requires_grad)
    return prefault_heap(full_step_bytes(param_bytes, compared_growth, batch_size, compared_size))


def _step_timer(reference: AssembledModel, moved: Batch) -> Callable[[], tuple[float, int]]:
    """One reference step a call, up to MAX_STEPS: its seconds and the pages it faulted."""
    steps = iter(range(MAX_STEPS))

    def step() -> tuple[float, int]:
        synchronize(reference.device)
        faults, start = page_faults(), time.perf_counter()
        timed_step(reference, moved, next(steps))
        synchronize(reference.device)
        return time.perf_counter() - start, page_faults() - faults

    return step


def _steadiness(prefault: Prefault | None) -> Callable[[int, float, int], bool]:
    """Whether step `index` (from 0), which took `seconds` and faulted `faults` pages, was steady."""
    if prefault is None or prefault.faults < MIN_MEASURED_FAULTS:
        return lambda index, seconds, faults: index > 0
    return lambda index, seconds, faults: faults * prefault.seconds_per_fault <= STEADY_FAULT_SHARE * seconds


def time_until_steady(
    step: Callable[[], tuple[float, int]], steady: Callable[[int, float, int], bool]
) -> list[tuple[float, int]]:
    """Run `step` (returning its seconds and page faults) until a steady step has run and
    MIN_TIMED_S have been timed, at most MAX_STEPS times; returns every step's (seconds, faults)."""
    timed: list[tuple[float, int]] = []
    seen_steady = False
    while len(timed) < MAX_STEPS:
        seconds, faults = step()
        seen_steady = seen_steady or steady(len(timed), seconds, faults)
        timed.append((seconds, faults))
        if seen_steady and sum(seconds for seconds, _ in timed) >= MIN_TIMED_S:
            break
    return timed
