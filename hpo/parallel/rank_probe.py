"""The probe on every rank, and the evidence of what each rank ran, each agreed over the group.

Before any rank trains, each rank runs the one-process probe (`hpo.verify.probing.run_probe`) on
its own device at its own batch: one real step under the trial's knobs, its evidence, and the
compared step against the fp32/eager/for-loop reference, with the probe's own blame (a known
refusal, evidence, a differential run). What it does not cover under ranks is said in
`PROBE_UNDER_RANKS`, recorded with the trial (a Lightning workload's ranks, which run it before
Lightning's Trainer starts, say their own: `hpo.trial._lightning_rank_train`). The ranks then gather
every rank's result; when any rank's probe failed, or raised, every rank raises the same
`AgreedVerdict` naming that rank, so no rank trains.

In training, the first step of every rank is captured as a one-process trial's evidence step is
(`hpo.evidence.capture`) and turned into that rank's `knobs_observed`. Gathered, each rank's is
compared with the request, and with rank 0's: a knob that ran as something else on any rank, or a
rank that ran other than rank 0, ends every rank `mismatch`, naming the rank."""

from __future__ import annotations

import dataclasses
import time

import torch

from hpo.config.trial import Knobs, TrialConfig
from hpo.errors import short_traceback
from hpo.evidence.observe import mismatch_verdict, mismatches
from hpo.parallel.agreement import AgreedVerdict, differences, gathered
from hpo.parallel.faults import describe_error
from hpo.verdicts import Kind, Verdict
from hpo.verify.probing import ProbeResult, run_probe
from hpo.workloads.base import Workload

__all__ = ["PROBE_UNDER_RANKS", "agreed_observation", "probe_on_rank"]

PROBE_UNDER_RANKS = (
    "each rank ran the one-process probe on its own device at its own batch, before the strategy wrapped its "
    "model: the compared step ran the knobs without DDP or FSDP2 (under FSDP2 the precision as autocast, not "
    "the MixedPrecisionPolicy the ranks train with); it timed nothing, the reference's step neither (slow is judged "
    "under ranks only from this machine's stored fact that its CPU emulates the precision), and its verdict is not cached"
)


def probe_on_rank(workload: Workload, config: TrialConfig, rank: int, world: int, device: torch.device) -> dict:
    """This rank's probe record once every rank's probe passed, with each rank's seconds; raises
    AgreedVerdict on every rank when one failed (the first by rank is named)."""
    every = gathered(_own_probe(workload, config, world, device), world)
    for failed, seen in enumerate(every):
        if seen["kind"] != Kind.OK.value:
            verdict = Verdict.make(Kind(seen["kind"]), f"rank {failed}'s probe: {seen['detail']}", seen["implicates"])
            raise AgreedVerdict(verdict, {"traceback": seen["traceback"], "probe_s": max(s["probe_s"] for s in every)})
    return {**every[rank], "probe_s_per_rank": [seen["probe_s"] for seen in every]}


def _own_probe(workload: Workload, config: TrialConfig, world: int, device: torch.device) -> dict:
    """This rank's probe at its batch, as a plain record; what it raised (never proven the knobs'
    fault: an error, or out of memory) as its verdict, with its traceback, for the group to agree on."""
    start = time.perf_counter()
    per_rank = dataclasses.replace(config.training, batch_size=config.training.batch_size // world)
    try:
        # No step timed, the reference's neither: nothing judges speed under ranks (`PROBE_UNDER_RANKS`).
        probe = run_probe(workload, dataclasses.replace(config, training=per_rank), device, timed=False, time_reference=False)
    except Exception as exc:  # noqa: BLE001 - recorded, and agreed on: every rank ends with it, none trains
        return {
            **describe_error(exc),
            "implicates": [],
            "traceback": short_traceback(exc),
            "probe_s": time.perf_counter() - start,
        }
    return _probe_record(probe)


def _probe_record(probe: ProbeResult) -> dict:
    return {
        "kind": probe.verdict.kind.value,
        "detail": probe.verdict.detail,
        "implicates": probe.verdict.implicated_record(),
        "traceback": None,
        "probe_s": probe.probe_s,
        "blame": probe.blame,
        "loss_rel_err": probe.loss_rel_err,
        "grad_rel_err": probe.grad_rel_err,
        "loss_bound": probe.loss_bound,
        "grad_bound": probe.grad_bound,
        "numerics_not_judged": probe.numerics_not_judged,
    }


def agreed_observation(observed: dict, requested: Knobs, world: int) -> dict:
    """Rank 0's `knobs_observed`, once no rank's contradicts `requested` and every rank's equals
    rank 0's; else AgreedVerdict `mismatch` on every rank, naming the first rank at fault."""
    every = gathered(observed, world)
    kept = {"knobs_observed": every[0]}
    for rank, seen in enumerate(every):
        found = mismatches(requested, seen)
        if found:
            raise AgreedVerdict(mismatch_verdict(Kind.MISMATCH, found, requested, prefix=f"rank {rank}: "), kept)
    for rank, seen in enumerate(every[1:], start=1):
        apart = differences(seen, every[0])
        if apart:
            raise AgreedVerdict(Verdict.make(Kind.MISMATCH, f"rank {rank} observed {'; '.join(apart)}"), kept)
    return every[0]
