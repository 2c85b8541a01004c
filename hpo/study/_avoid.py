"""A sampler wrapper that never proposes a knob value, or pair of values, already known to fail.

Constraints teach TPE, NSGA-II and GP to prefer feasible regions, but they still revisit a failed
region now and then (categorical priors are smoothed), and CMA-ES and random ignore constraints
altogether. Re-proposing a failure buys nothing: its verdict is cached. So the wrapper keeps the
*parts* that failed, as the verdicts implicate them (`hpo.verdicts`): a single value such as
`attention=flash_attn` when a package is missing, a pair such as `attention=sdpa_flash` with
`precision=fp32` when a kernel refuses a dtype. Any proposal that contains a known-bad part is
mended, not redrawn:

- in `sample_relative`, the categorical params of a clashing part are dropped from the base
  sampler's proposal, so Optuna asks `sample_independent` for them;
- `sample_independent` takes the base sampler's value unless it would complete a known-bad part
  with the params already chosen or still to come from the relative proposal, and then picks
  among the values that would not.

So the base sampler is asked exactly as often as without the wrapper. A `slow` verdict's part
carries the batch size it was measured at, so it avoids the values at that batch size only. Only
`incompatible` and `slow` verdicts are avoided, and an `oom` verdict that names its batch size
(`hpo.trial._memory_limit`, predicted or real): its searched knobs at that batch size or any larger
one, since a larger batch never needs less memory. Divergence depends on the learning rate. A part
that names a knob the study does not search (it is fixed) never matches a proposal, so it costs
nothing; an empty part, which a verdict about training params alone would give, is dropped, or it
would match every proposal.

A worker also avoids what cannot run on its own machine (`avoiding_here`): the values and pairs
`hpo.verify.machine._kernel_check` found unrunnable there before its first trial (a missing package, a kernel
whose ops do not load, a device type, a known dtype refusal). They are not verdicts of the study:
a worker on another machine of the same study may run them, so they are kept in this process only.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterable, Iterator
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from hpo.knobs.registry import KNOB_NAMES
from hpo.records import RecordKey
from hpo.storage import trial_id_of
from hpo.verdicts import Kind, Part, Verdict
from hpo.verify.stored import StudyVerdicts

__all__ = ["AvoidKnownFailures", "avoiding_here", "known_bad_parts"]

# The parts this process's machine cannot run, while a worker is inside `avoiding_here`.
_NOT_RUNNABLE_HERE: frozenset[Part] = frozenset()


@contextlib.contextmanager
def avoiding_here(parts: Iterable[Part]) -> Iterator[None]:
    """While inside, every wrapped sampler in this process also avoids `parts` (each a value or a
    pair of searched knobs), as it avoids the study's verdicts."""
    global _NOT_RUNNABLE_HERE
    previous, _NOT_RUNNABLE_HERE = _NOT_RUNNABLE_HERE, frozenset(p for p in parts if p)
    try:
        yield
    finally:
        _NOT_RUNNABLE_HERE = previous


# In a part, this key in place of `batch_size` matches that batch size and every larger one.
BATCH_OR_LARGER = "batch_size>="


def _memory_part(trial: FrozenTrial) -> Part | None:
    """An `oom` trial's searched knobs at its batch size or larger; None for an OOM that names no
    batch size (recorded before memory budgets)."""
    implicated = dict(trial.user_attrs.get(RecordKey.VERDICT_IMPLICATES) or [])
    if "batch_size" not in implicated:
        return None
    knobs = [(k, v) for k, v in implicated.items() if k in KNOB_NAMES and k in trial.params]
    return Verdict.part_from_record([*knobs, (BATCH_OR_LARGER, implicated["batch_size"])])


def _parts_of_trial(trial: FrozenTrial) -> Part | None:
    verdict = Verdict.parse(trial.user_attrs.get(RecordKey.VERDICT))
    if verdict.kind is Kind.OOM:
        return _memory_part(trial)
    if not verdict.avoidable:
        return None
    if RecordKey.VERDICT_IMPLICATES in trial.user_attrs:
        return Verdict.part_from_record(trial.user_attrs[RecordKey.VERDICT_IMPLICATES])
    # Trials recorded before verdicts named their parts: the whole knob combination is the part.
    knobs = trial.user_attrs.get(RecordKey.KNOBS_REQUESTED) or {}
    return Verdict.part_from_record((k, v) for k, v in knobs.items() if k in trial.params)


def _parts_of_cache(study: optuna.Study) -> list[Part]:
    """Parts from the study's verdict cache, which `hpo probe` fills before any trial runs."""
    if not hasattr(study, "user_attrs"):  # a pruner's filtered view of the study (see before_trial)
        return []
    records = StudyVerdicts(study).all().values()
    return [
        Verdict.part_from_record(r.get("implicates") or ())
        for r in records
        if isinstance(r, dict) and Verdict.parse(r.get("verdict")).avoidable
    ]


def known_bad_parts(study: optuna.Study) -> set[Part]:
    """The non-empty parts to avoid, from the study's rejected trials and its verdict cache, and
    those this machine cannot run (`avoiding_here`)."""
    trials = study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
    found = {part for part in [*map(_parts_of_trial, trials), *_parts_of_cache(study)] if part}
    return found | _NOT_RUNNABLE_HERE


def _clashes(part: Part, params: dict[str, Any]) -> bool:
    """Whether `params` contain the part. A knob the study fixes is no param, and a part naming it
    never matches (nothing could mend it); a training hyperparameter in a part (the batch size a
    `slow` verdict was measured at) matches when the study fixes it, since every trial has it."""
    return all(_holds(k, v, params) for k, v in part)


def _holds(key: str, value: Any, params: dict[str, Any]) -> bool:
    if key == BATCH_OR_LARGER:
        return params["batch_size"] >= value if "batch_size" in params else True
    return params[key] == value if key in params else key not in KNOB_NAMES


def _choices(name: str, distribution: BaseDistribution) -> list | None:
    """The values a param can be mended to: a categorical's choices, or a searched integer batch
    size's values (an `oom` part bounds it from above); None for any other param."""
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    if name == "batch_size" and isinstance(distribution, IntDistribution) and not distribution.log:
        return list(range(distribution.low, distribution.high + 1, distribution.step))
    return None


class AvoidKnownFailures(BaseSampler):
    def __init__(self, base: BaseSampler, seed: int | None = None):
        self.base, self._rng = base, random.Random(seed)
        self._bad: dict[int, set[Part]] = {}  # per running trial: the parts to avoid, read once
        self._relative: dict[int, dict[str, Any]] = {}  # per running trial: its relative values

    def _parts(self, study: optuna.Study, trial: FrozenTrial) -> set[Part]:
        trial_id = trial_id_of(trial)
        if trial_id not in self._bad:
            self._bad[trial_id] = known_bad_parts(study)
        return self._bad[trial_id]

    def infer_relative_search_space(self, study, trial) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space) -> dict[str, Any]:
        params = self.base.sample_relative(study, trial, search_space)
        clashing = [part for part in self._parts(study, trial) if _clashes(part, params)]
        drop = {k for part in clashing for k, _ in part if isinstance(search_space.get(k), CategoricalDistribution)}
        kept = {k: v for k, v in params.items() if k not in drop}
        self._relative[trial_id_of(trial)] = kept  # values still to come: sample_independent must see them
        return kept

    def sample_independent(self, study, trial, param_name: str, param_distribution: BaseDistribution) -> Any:
        value = self.base.sample_independent(study, trial, param_name, param_distribution)
        choices = _choices(param_name, param_distribution)
        if choices is None:
            return value
        bad = self._parts(study, trial)

        # The trial's relative values count too, though the objective may suggest them later.
        fixed = {**self._relative.get(trial_id_of(trial), {}), **trial.params}

        def completes_bad(choice) -> bool:
            chosen = {**fixed, param_name: choice}
            return any(_clashes(part, chosen) for part in bad)

        if completes_bad(value):
            others = [c for c in choices if not completes_bad(c)]
            if others:
                value = self._rng.choice(others)
        return value

    def before_trial(self, study, trial) -> None:
        # Read here, with the real study: HyperbandPruner hands the sampling calls a per-bracket
        # view of it that has trials but no user attrs (so no verdict cache).
        self._bad[trial_id_of(trial)] = known_bad_parts(study)
        self.base.before_trial(study, trial)

    def after_trial(self, study, trial: FrozenTrial, state, values) -> None:
        self._bad.pop(trial_id_of(trial), None)
        self._relative.pop(trial_id_of(trial), None)
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()
        self._rng.seed()
