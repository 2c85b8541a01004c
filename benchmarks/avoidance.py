"""How well each sampler, plain and wrapped by `AvoidKnownFailures`, stays off known failures.

A synthetic study, so it runs in seconds: attention {sdpa, eager, flash} x compile {off, on} plus a
learning rate, where `flash` always fails (a missing package: one implicated value) and `eager` with
compile fails (a pair). Trials are recorded exactly as hpo's objective records them (verdict,
implicated parts, the violated constraint, the worst value), so the samplers see what they see in a
real study. Counted per sampler: proposals that repeat a failure already known when they were made,
calls of the base sampler's `sample_relative`, and the time spent sampling.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import optuna

from hpo.config.schema import SamplerSpec
from hpo.storage import record_feasibility
from hpo.study import SAMPLERS, AvoidKnownFailures
from hpo.verdicts import Kind, Verdict

__all__ = ["AvoidanceRun", "run_avoidance"]

FLASH = (("attention", "flash"),)
EAGER_COMPILED = (("attention", "eager"), ("compile", True))


@dataclass
class AvoidanceRun:
    sampler: str
    wrapped: bool
    trials: int
    known_bad_proposals: int
    sample_relative_calls: int
    sampling_s: float


class _Counting(optuna.samplers.BaseSampler):
    """Counts the base sampler's relative samplings and times every sampling call."""

    def __init__(self, base: optuna.samplers.BaseSampler):
        self.base, self.relative_calls, self.seconds = base, 0, 0.0

    def _timed(self, fn, *args):
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.seconds += time.perf_counter() - start

    def infer_relative_search_space(self, study, trial):
        return self._timed(self.base.infer_relative_search_space, study, trial)

    def sample_relative(self, study, trial, search_space):
        self.relative_calls += 1
        return self._timed(self.base.sample_relative, study, trial, search_space)

    def sample_independent(self, study, trial, name, distribution):
        return self._timed(self.base.sample_independent, study, trial, name, distribution)

    def before_trial(self, study, trial):
        self.base.before_trial(study, trial)

    def after_trial(self, study, trial, state, values):
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self):
        self.base.reseed_rng()


def _verdict(params: dict) -> Verdict:
    if params["attention"] == "flash":
        return Verdict.make(Kind.INCOMPATIBLE, "attention=flash needs the flash-attn package", FLASH)
    if params["attention"] == "eager" and params["compile"]:
        return Verdict.make(Kind.INCOMPATIBLE, "attention=eager with compile fails to compile here", EAGER_COMPILED)
    return Verdict(Kind.OK)


def _objective(trial: optuna.Trial) -> float:
    params = {
        "attention": trial.suggest_categorical("attention", ["sdpa", "eager", "flash"]),
        "compile": trial.suggest_categorical("compile", [False, True]),
        "lr": trial.suggest_float("lr", 1e-4, 1e-1, log=True),
    }
    verdict = _verdict(params)
    trial.set_user_attr("verdict", str(verdict))
    trial.set_user_attr("verdict_implicates", verdict.implicated_record())
    record_feasibility(trial, 0.0 if verdict.ok else 1.0)
    return (math.log10(params["lr"]) + 2.5) ** 2 if verdict.ok else math.inf


def _repeats_known_failure(trials: list[optuna.trial.FrozenTrial]) -> int:
    known: set = set()
    repeats = 0
    for t in trials:
        parts = {p for p in (FLASH, EAGER_COMPILED) if all(t.params.get(k) == v for k, v in p)}
        repeats += bool(parts & known)
        known |= parts
    return repeats


def run_avoidance(sampler: str, wrapped: bool, n_trials: int = 30, seed: int = 0) -> AvoidanceRun:
    counting = _Counting(SAMPLERS[sampler](SamplerSpec(name=sampler, seed=seed)))
    used = AvoidKnownFailures(counting, seed=seed) if wrapped else counting
    study = optuna.create_study(sampler=used)
    study.optimize(_objective, n_trials=n_trials)
    trials = study.get_trials(deepcopy=False)
    return AvoidanceRun(sampler, wrapped, n_trials, _repeats_known_failure(trials), counting.relative_calls, counting.seconds)


def table(runs: list[AvoidanceRun]) -> str:
    head = (
        f"{'sampler':8} {'wrapped':8} {'trials':>6} {'known-bad proposals':>20} {'sample_relative calls':>22} {'sampling s':>11}"
    )
    rows = [
        f"{r.sampler:8} {str(r.wrapped):8} {r.trials:6d} {r.known_bad_proposals:20d} {r.sample_relative_calls:22d} {r.sampling_s:11.2f}"
        for r in runs
    ]
    return "\n".join([head, *rows])


def as_json(runs: list[AvoidanceRun]) -> list[dict]:
    return [asdict(r) for r in runs]
