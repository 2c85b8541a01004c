"""A trial process the kernel's OOM killer ended, told apart from one ended by `kill -9` by the
OOM-kill count of its cgroup (or machine) rising while it ran (`hpo.hardware._oom_kills`).

It is recorded as a trial whose allocation failed inside it is (`hpo.trial._executor`): COMPLETE with
the worst value and its constraint violated, `oom: …`, implicating its searched knobs at its batch
size, so that the sampler avoids them at that batch and above (`hpo.study._avoid`); and it is not
retried, since the same parameters would need the same memory. A SIGKILL with no OOM kill counted
stays `crashed` and is retried. A SIGKILL with no counter to read says so.
"""

from __future__ import annotations

import signal

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from hpo.config.objectives import worst_value
from hpo.config.space import SearchSpace
from hpo.hardware import OomKillCounter
from hpo.knobs.registry import KNOB_NAMES
from hpo.records import RecordKey
from hpo.storage import record_feasibility_of, storage_of
from hpo.verdicts import Kind, Verdict

__all__ = ["killed_for_memory", "record_killed_for_memory"]


def killed_for_memory(exitcode: int | None, counter: OomKillCounter | None, before: int | None) -> Verdict | None:
    """The `oom` verdict of a trial process that died of SIGKILL while `counter` rose from
    `before`; None for any other death, or when there is no count to show it."""
    if exitcode != -signal.SIGKILL or counter is None or before is None:
        return None
    after = counter.read()
    if after is None or after <= before:
        return None
    return Verdict(
        Kind.OOM,
        f"the kernel's OOM killer ended the trial process (SIGKILL; oom_kill in {counter.path} "
        f"rose from {before} to {after} while it ran)",
    )


def record_killed_for_memory(study: optuna.Study, trial_id: int, verdict: Verdict, space: SearchSpace) -> bool:
    """Record the trial `oom` (see the module's doc); False when it had already finished."""
    storage = storage_of(study)
    trial = storage.get_trial(trial_id)
    verdict = Verdict.make(verdict.kind, verdict.detail, _implicated(trial.params, space))
    try:
        storage.set_trial_user_attr(trial_id, RecordKey.VERDICT, str(verdict))
        storage.set_trial_user_attr(trial_id, RecordKey.VERDICT_IMPLICATES, verdict.implicated_record())
        record_feasibility_of(storage, trial_id, 1.0)
        values = [worst_value(direction) for direction in space.study.directions]
        return storage.set_trial_state_values(trial_id, TrialState.COMPLETE, values)
    except UpdateFinishedTrialError:
        return False


def _implicated(params: dict, space: SearchSpace) -> list[tuple[str, object]]:
    """The trial's searched knobs and its batch size (searched or fixed); no batch size for
    `batch_size: auto`, whose chosen batch died with the process."""
    knobs = [(name, value) for name, value in params.items() if name in KNOB_NAMES]
    batch = params.get("batch_size", space.spec.params.get("batch_size"))
    return knobs + ([("batch_size", batch)] if isinstance(batch, int) else [])
