"""Timing knob combinations at a trial's batch, and proving which values make a trial `slow`.

A trial is judged slow from its own first steady steps (`hpo.trial.trainer`) or, in `hpo probe`,
from the probe's timed steps. Either says that the combination is slow, not which of its values is:
bf16 on a CPU without avx512_bf16 makes every combination that contains it slow, whatever the
attention or optimizer. So before a `slow` verdict is cached, the differing values are timed from
the reference one at a time, then in pairs (`hpo.verify.blame.isolate`), and only the subset that is
slow by itself is implicated. If none is, the whole combination is timed again; not slow then, the
first measurement was noise (a busy machine) and nothing is cached. Each timing is paired with a
reference step timed just before it, in three rounds (the fastest of each side), so neither a machine
busier than when the reference was first timed nor a burst of load makes a value look slow.
"""

from __future__ import annotations

import dataclasses
import math
import time

import torch

from hpo.config.trial import Knobs, TrialConfig
from hpo.engine.assembly import AssembledModel
from hpo.engine.step import run_step
from hpo.hardware.runtime import seed_everything, synchronize
from hpo.verdicts import Verdict
from hpo.verify.blame import isolate
from hpo.verify.reference_knobs import REFERENCE_KNOBS
from hpo.verify.slow import SlowLimit
from hpo.workloads.base import Batch, Workload

__all__ = ["fastest_step_ms", "prove_slow", "time_knobs"]

TIMED_STEPS = 2  # the fastest of two warm steps: noise only ever adds time
# Rounds of (reference, knobs) timings a subset must be slow in, each against the fastest of all so
# far: one round slowed by a neighbour's burst (seen: 80 ms against 17 ms) proves nothing.
PROOF_ROUNDS = 3


def fastest_step_ms(assembled: AssembledModel, batch: Batch, steps: int, budget_ms: float) -> float:
    """Fastest of a few warm steps (noise only ever adds time); stops early once a step exceeds
    `budget_ms`, since one warm step that slow is proof enough."""
    moved = assembled.move(batch)
    times = []
    for step in range(1, steps + 1):
        synchronize(assembled.device)
        start = time.perf_counter()
        run_step(assembled, moved, step)
        synchronize(assembled.device)
        times.append(1000 * (time.perf_counter() - start))
        if times[-1] > budget_ms:
            break
    return min(times)


def time_knobs(
    workload: Workload, config: TrialConfig, knobs: Knobs, device: torch.device, batch: Batch, budget_ms: float
) -> float:
    """The fastest warm step of a fresh model under `knobs` at the trial's batch. One untimed step
    first: it compiles, creates the optimizer's state and faults the step's memory in."""
    seed_everything(config.seed)
    assembled = AssembledModel(workload, knobs, config.training, device)
    assembled.model.eval()  # as the probe times: no recompile for train mode mid-measurement
    run_step(assembled, assembled.move(batch), 0)
    return fastest_step_ms(assembled, batch, TIMED_STEPS, budget_ms)


def prove_slow(workload: Workload, config: TrialConfig, device: torch.device, limit: SlowLimit) -> Verdict | None:
    """The `slow` verdict of the smallest subset of the trial's knobs that is slow on its own at the
    trial's batch size; None when not even the whole combination is slow when timed again.

    Each subset is compared with the reference timed just before it, in `PROOF_ROUNDS` rounds, not
    with `limit`'s stored reference time: that was measured at another moment, and a machine busier
    now than then (another worker, another job) would make every subset look slow, and the first
    one tried be cached as slow for the whole study."""
    batch = next(workload.train_batches(config.training.batch_size, config.seed))

    def slow(knobs: Knobs) -> Verdict | None:
        reference_ms = knobs_ms = math.inf
        for _ in range(PROOF_ROUNDS):  # a burst of load must slow every round of the knobs to count
            reference_ms = min(reference_ms, time_knobs(workload, config, REFERENCE_KNOBS, device, batch, math.inf))
            knobs_ms = min(knobs_ms, time_knobs(workload, config, knobs, device, batch, reference_ms * limit.ratio))
            if knobs_ms <= reference_ms * limit.ratio:
                return None
        return dataclasses.replace(limit, reference_ms=reference_ms).verdict(knobs, knobs_ms)

    return isolate(config.knobs, slow)
