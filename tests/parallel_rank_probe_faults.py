"""Faults of one rank, injected in the spawned ranks only, for the probe on every rank and the
evidence each rank records (`hpo.parallel.rank_probe`), on hpo's loop's ranks and Lightning's. A rank imports this module when it unpickles
`fault_hook`, the launcher's per-step hook, at its start, before its probe, so the patches below
apply in the rank; they strike only where `torch.distributed` says this is rank FAULTY_RANK.
`faulting_in_ranks` sets what the ranks inherit: the fault, and the pid of the process whose
children inject it (the test's own process imports this module too, and patches nothing)."""

from __future__ import annotations

import dataclasses
import functools
import os

import torch.distributed as dist

import hpo.parallel.rank_loop as rank_loop
import hpo.verify.probing._compared_step as compared_step

FAULTY_RANK = 1
FAULT = os.environ.get("HPO_TEST_RANK_FAULT")
# What the probe's step raises on the faulty rank; the test finds it in the kept traceback.
PROBE_ERROR = "injected: this rank's probe step failed"


def faulting_in_ranks(monkeypatch, fault: str) -> None:
    monkeypatch.setenv("HPO_TEST_RANK_FAULT", fault)
    monkeypatch.setenv("HPO_TEST_RANK_FAULT_BY_CHILDREN_OF", str(os.getpid()))


def faulty_trial(monkeypatch, fault: str, config, deadline_s: float = 300) -> tuple:
    """`config`'s trial of ranks through hpo's path (`execute_ranks`) with `fault` in rank
    FAULTY_RANK: its outcome and its record."""
    from hpo.parallel import run_ranks
    from hpo.trial import _ranks as ranks

    faulting_in_ranks(monkeypatch, fault)
    monkeypatch.setattr(ranks, "run_ranks", functools.partial(run_ranks, after_step=fault_hook))
    attrs: dict = {}
    outcome = ranks.execute_ranks(config, attrs, deadline_s=deadline_s)
    return outcome, attrs


def _on_faulty_rank() -> bool:
    return dist.is_initialized() and dist.get_rank() == FAULTY_RANK


def _precision_dropped(knobs_on_rank):
    """The knobs the faulty rank's model is built with lose their precision (fp32 runs instead)."""

    def dropped(knobs, settings):
        kept = knobs_on_rank(knobs, settings)
        return dataclasses.replace(kept, precision="fp32") if _on_faulty_rank() else kept

    return dropped


def _precision_dropped_in_probe(assembled_model):
    """The faulty rank's probe builds the trial's model without its precision (fp32 runs instead):
    the probe's evidence sees fp32 where the knobs ask another."""

    def dropped(workload, knobs, training, device):
        if _on_faulty_rank() and knobs.precision != "fp32":
            knobs = dataclasses.replace(knobs, precision="fp32")
        return assembled_model(workload, knobs, training, device)

    return dropped


def _step_raises(loss_and_grads, only_precision: str | None):
    """The probe's compared step raises on the faulty rank: under every knob, or only where the
    model runs `only_precision` (then the reference passes, and the probe's differential run
    proves that precision at fault)."""

    def raising(assembled, batch):
        if _on_faulty_rank() and only_precision in (None, assembled.knobs.precision):
            raise RuntimeError(PROBE_ERROR)
        return loss_and_grads(assembled, batch)

    return raising


if FAULT is not None and os.environ.get("HPO_TEST_RANK_FAULT_BY_CHILDREN_OF") == str(os.getppid()):
    if FAULT == "precision_dropped":
        rank_loop.knobs_on_rank = _precision_dropped(rank_loop.knobs_on_rank)
    elif FAULT == "probe_precision_dropped":
        compared_step.AssembledModel = _precision_dropped_in_probe(compared_step.AssembledModel)
    elif FAULT == "probe_raises":
        compared_step.loss_and_grads = _step_raises(compared_step.loss_and_grads, None)
    elif FAULT == "probe_raises_under_bf16":
        compared_step.loss_and_grads = _step_raises(compared_step.loss_and_grads, "bf16")


def fault_hook(rank: int, step: int) -> None:
    """The hook that brings this module into each rank; it does nothing itself."""
