"""A parallel knob dropped on its way to torch, in the spawned ranks only, to prove that a trial
notices a knob that did not take effect. A rank imports this module when it unpickles `drop_knob`,
the launcher's per-step hook, before it wraps its model, so the patch below applies in the rank.
`dropping_in_ranks` sets what the ranks inherit: the knob dropped, and the pid of the process
whose children drop it (the test's own process imports this module too, and patches nothing)."""

from __future__ import annotations

import os

import hpo.parallel.wrap as wrap

DROPPED = os.environ.get("HPO_TEST_DROPPED_KNOB")


def dropping_in_ranks(monkeypatch, knob: str) -> None:
    monkeypatch.setenv("HPO_TEST_DROPPED_KNOB", knob)
    monkeypatch.setenv("HPO_TEST_DROPPED_BY_CHILDREN_OF", str(os.getpid()))


def _without_dropped(build):
    def built(module, **kwargs):
        kwargs.pop(DROPPED)  # torch's default applies instead of the requested value
        return build(module, **kwargs)

    return built


if DROPPED is not None and os.environ.get("HPO_TEST_DROPPED_BY_CHILDREN_OF") == str(os.getppid()):
    if DROPPED == "reshard_after_forward":
        wrap.fully_shard = _without_dropped(wrap.fully_shard)
    else:
        wrap.DistributedDataParallel = _without_dropped(wrap.DistributedDataParallel)


def drop_knob(rank: int, step: int) -> None:
    """The hook that brings this module into each rank; it does nothing itself."""
