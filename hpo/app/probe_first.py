"""Run `study.strategy: probe_first`'s opening sweep, once per study, and store its decision.

`decide(study, space)` is called by `hpo run` and `hpo worker` before any trial starts. The first
worker to insert the study attr `LOCK_ATTR` (insert-if-absent: atomic in an RDB storage) runs the
sweep of `hpo probe` (`hpo.app.sweep`, its verdicts going to the study's verdict cache) with one
timed step a combination, races the verified ones (more steps, interleaved, only for those that
could still be kept; `raced_times`), ranks them (`hpo.study.strategy.rank_precision`) and stores
the decision under `KEPT_ATTR` (the study note shows it after the worker's first trial). Every other worker waits until the decision is stored and reads it: the sweep never runs
twice. If the sweep fails, its worker stores the failure (`FAILED_ATTR`) and the waiting ones stop
with it; a waiting worker on the same host also sees the sweeping process die. The next `hpo run`
or `hpo worker` then sweeps again under a new lock.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna

from hpo.app.sweep import SweepRow, sweep, table
from hpo.app.sweep_models import WarmModels, knobs_key
from hpo.config.resolve import build_config, representative_values
from hpo.config.space import SearchSpace
from hpo.config.trial import Knobs, TrialConfig
from hpo.engine.assembly import AssembledModel
from hpo.hardware.runtime import resolve_device, seed_everything, trial_runtime
from hpo.reporting.sweep_decision import KEPT_ATTR, decision_note
from hpo.storage.optuna_compat import add_study_user_attr
from hpo.study.strategy import FAILED_ATTR, LOCK_ATTR, TIE_MARGIN, Timing, kept_of, outpaced, rank_precision, rejected_lines
from hpo.verify.cache import StudyVerdicts
from hpo.verify.machine_facts import MachineFacts
from hpo.verify.steady import DEFAULT_POLICY, ONE_STEP, time_model
from hpo.workloads.catalog import create_workload

__all__ = ["NothingVerified", "Race", "decide", "make_decision", "raced_times"]

# The sweep times each combination with one step (`ONE_STEP`); the race times again, one step a
# round, only those that could still be among their precision's `keep_fastest`, until the ones left
# are steady under this policy (`TimingPolicy.settled`): untimed steps once per model, then repeats.
POLICY = DEFAULT_POLICY
WAIT_S = 1.0  # how often a waiting worker reads the study for the decision


class NothingVerified(Exception):
    """No combination of the space passed the sweep: one line per rejected value (exit 1)."""


def decide(study: optuna.Study, space: SearchSpace, say: Callable[[str], None] | None = None) -> dict | None:
    """The study's probe_first decision (None for `joint`): read, waited for, or made here."""
    if space.study.strategy != "probe_first":
        return None
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    decided = None
    while decided is None:
        attempt = sum(k.startswith(FAILED_ATTR) for k in study.user_attrs)  # a failed sweep is retried by a later run
        me = {"host": socket.gethostname(), "pid": os.getpid(), "at": time.time()}
        if add_study_user_attr(study, f"{LOCK_ATTR}:{attempt}", me):
            decided = _sweep_and_store(study, space, attempt, say)
        else:
            decided = _wait(study, attempt, say)
    if not decided["kept"]:
        raise NothingVerified("\n".join(decided["rejected"]))
    return decided


def _wait(study: optuna.Study, attempt: int, say) -> dict | None:
    """The decision once stored; None when the sweeper died on this host (the caller sweeps again)."""
    sweeper = study.user_attrs.get(f"{LOCK_ATTR}:{attempt}") or {}
    if KEPT_ATTR not in study.user_attrs:
        say(f"study {study.study_name!r}: waiting for the knob sweep run by {sweeper.get('host')}:{sweeper.get('pid')}")
    while True:
        attrs = study.user_attrs  # read from the storage each time
        if KEPT_ATTR in attrs:
            return attrs[KEPT_ATTR]
        failed = attrs.get(f"{FAILED_ATTR}{attempt}")
        if failed is not None:
            raise RuntimeError(f"study.strategy probe_first: the sweep failed ({failed['error']}); run again to retry it")
        if sweeper.get("host") == socket.gethostname() and not _alive(sweeper.get("pid")):
            add_study_user_attr(study, f"{FAILED_ATTR}{attempt}", {"error": f"the sweeping process {sweeper.get('pid')} died"})
            return None
        time.sleep(WAIT_S)


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


def _sweep_and_store(study: optuna.Study, space: SearchSpace, attempt: int, say) -> dict:
    try:
        machine = MachineFacts()
        started = time.perf_counter()
        warm = WarmModels()
        try:
            rows = sweep(space, StudyVerdicts(study), machine=machine, memory=False, policy=ONE_STEP, warm=warm)
            decided = {**make_decision(space, rows, space.study.keep_fastest, machine=machine, warm=warm)}
        finally:
            warm.clear()  # nothing of the sweep stays on the device for the trials
        decided["sweep_s"] = time.perf_counter() - started
    except BaseException as exc:  # the waiting workers must learn it, or they would wait forever
        add_study_user_attr(study, f"{FAILED_ATTR}{attempt}", {"error": f"{type(exc).__name__}: {exc}"[:500]})
        raise
    # The study note shows the decision once this worker's first trial ends
    # (`hpo.runtime.workers`): importing optuna_dashboard here took 3 s of a 15 s sweep.
    study.set_user_attr(KEPT_ATTR, decided)
    say(decision_note(decided))
    return decided


def make_decision(
    space: SearchSpace,
    rows: list[SweepRow],
    keep: int,
    measure=None,
    machine: MachineFacts | None = None,
    warm: WarmModels | None = None,
) -> dict:
    """Rank the verified rows per precision on raced timings; keep `keep` of each. The race starts
    from each row's own timing in the sweep (`SweepRow.steps_ms`) and times again only what could
    still be among the kept (`raced_times`). Rows this machine already raced (`known_ms`) are
    confirmed by one timing of their precision's front runners instead; with `machine`, each row's
    raced times are stored for the next study. `warm` holds the sweep's timed models for the race."""
    by_precision: dict[str, list[SweepRow]] = {}
    for row in rows:
        if row.verdict == "ok":
            by_precision.setdefault(row.knobs["precision"], []).append(row)
    started = time.perf_counter()
    groups = {p: [r.knobs for r in group] for p, group in sorted(by_precision.items())}
    prior = {knobs_key(r.knobs): tuple(r.known_ms) for r in rows if r.known_ms}
    first = {knobs_key(r.knobs): tuple(r.steps_ms) for r in rows if r.steps_ms}
    race = raced_times(space, groups, keep, measure, prior, first, warm)
    if machine is not None:
        for row in rows:
            if row.machine_key and knobs_key(row.knobs) in race.times:
                machine.update(row.machine_key, raced_ms=list(race.times[knobs_key(row.knobs)]))
    ranked = {
        precision: rank_precision([Timing(r.knobs, race.times[knobs_key(r.knobs)]) for r in group])
        for precision, group in sorted(by_precision.items())
    }
    return {
        "kept": kept_of(ranked, keep),
        "table": table(rows),
        "ranking": [_ranking_line(p, r) for p, rs in ranked.items() for r in rs],
        "rejected": rejected_lines([{"knobs": r.knobs, "verdict": r.verdict} for r in rows], space.systems),
        "keep_fastest": keep,
        "timing": POLICY.record(),
        "timed_again_s": time.perf_counter() - started,
        "timings": sum(race.timed.values()),
        "tie_margin": TIE_MARGIN,
        "dropped": race.dropped,
        "confirmed": race.confirmed,
        "discarded": race.discarded,
        "from_machine": sum(r.from_machine for r in rows),
    }


def _confirm(race: Race, precision: str, keys: list[str], prior: dict, keep: int, time_one, knobs_of) -> dict[str, list[float]]:
    """The times to race one precision on, from this machine's stored race (`prior`): the `keep`
    front runners on the stored times are timed once now. Confirmed unless one of them is now faster
    than its stored fastest by more than a single timing's noise (at least the tie margin): noise only
    adds time, so a stored fastest that is beaten was not this machine's speed, and the stored times
    are dropped (the precision is raced on the new timings alone). A slower confirming step is no such
    evidence (a busier machine, or one step's outlier); it joins the stored repeats, and the race goes
    on from them all: usually at once decided, the stored repeats being steady already."""
    stored = {k: list(prior[k]) for k in keys}
    out = outpaced({k: tuple(v) for k, v in stored.items()}, keep)
    ranked = rank_precision([Timing(knobs_of(k), tuple(stored[k])) for k in keys if k not in out])
    front = [knobs_key(r.timing.knobs) for r in ranked[:keep]]
    now = {k: time_one(k) for k in front}
    noise = 1 + max(TIE_MARGIN, POLICY.steady_spread)
    if any(now[k] * noise < min(stored[k]) for k in front):
        race.discarded[precision] = {k: {"confirming_ms": now[k], "stored_fastest_ms": min(stored[k])} for k in front}
        return {k: [now[k]] if k in now else [] for k in keys}
    race.confirmed[precision] = now
    return {k: [*stored[k], now[k]] if k in now else stored[k] for k in keys}


def _ranking_line(precision: str, ranked) -> dict:
    timing = ranked.timing
    return {
        "precision": precision,
        "rank": ranked.rank,
        "knobs": timing.knobs,
        "step_ms": timing.median_ms,
        "spread": timing.spread,
        "times_ms": list(timing.times_ms),  # the repeats it was ranked on: how a tie came about
        "tied_with": [knobs_key(k) for k in ranked.tied_with],
    }


@dataclass
class Race:
    """Each candidate's step times, one per timing (`times`; the first is the sweep's own when it
    had one), how many of them the race itself ran (`timed`), and the candidates dropped from the
    race: after which timing, why and on which times (`dropped`)."""

    times: dict[str, tuple[float, ...]] = field(default_factory=dict)
    timed: dict[str, int] = field(default_factory=dict)
    dropped: list[dict] = field(default_factory=list)
    # Per precision decided from this machine's stored times: the confirming timings (ms).
    confirmed: dict[str, dict[str, float]] = field(default_factory=dict)
    # Per precision whose stored times a faster confirming step showed were not this machine's
    # speed: each front runner's confirming and stored fastest timing (ms); it was raced afresh.
    discarded: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)


def raced_times(
    space: SearchSpace, groups: dict[str, list[dict]], keep: int, measure=None, prior=None, first=None, warm=None
) -> Race:
    """Race each precision's candidates (`groups`) to its `keep` fastest, timing as little as that
    needs. Each candidate starts with its timing in the sweep (`first`, one step), or one taken now;
    then, round after round, every candidate still in the race and not yet steady is timed once
    more, starting at a rotated position (so a machine that slows down for a while slows every candidate alike), and
    those that provably cannot be among their precision's `keep` fastest (`outpaced`) leave it. A
    precision is decided when every candidate left in it is steady under `POLICY`
    (`TimingPolicy.settled`): so the kept ones, and any tie among them, are timed as steadily as any
    other ranking. A precision whose every candidate has `prior` times (this machine's, from an
    earlier study) is raced on them instead, after one confirming timing of those still in front
    (`_confirm`). The race steps the sweep's own models where `warm` kept them (already warm: no
    untimed step), and builds the others. `measure(config, timing)` is the timer (`timing`: 0 for a model's first); tests
    replace it."""
    race = Race()
    first = first or {}
    running = {p: [knobs_key(k) for k in group] for p, group in groups.items() if group}
    if not running:
        return race
    values = representative_values(space)
    configs = {knobs_key(k): build_config(space, values, Knobs(**k)) for group in groups.values() for k in group}
    times: dict[str, list[float]] = {key: list(first.get(key, ())) for key in configs}
    with _Timer(list(configs.values()), warm) if measure is None else _Fixed(measure) as timer:

        def time_one(key: str) -> float:
            ms = timer(configs[key], race.timed.get(key, 0))
            race.timed[key] = race.timed.get(key, 0) + 1
            return ms

        for precision, keys in running.items():
            if prior and all(k in prior for k in keys):
                times.update(_confirm(race, precision, keys, prior, keep, time_one, lambda k: configs[k].knobs.as_dict()))
        rotation = 0
        while True:
            for precision, keys in running.items():
                out = outpaced({k: tuple(times[k]) for k in keys if times[k]}, keep)
                race.dropped += [
                    {
                        "knobs": configs[k].knobs.as_dict(),
                        "round": len(times[k]),
                        "reason": _why(why, race, k),
                        "times_ms": list(times[k]),
                    }
                    for k, why in out.items()
                ]
                running[precision] = [k for k in keys if k not in out]
                for k in out:
                    timer.release(configs[k])  # a dropped candidate is timed no more: its model goes now
            running = {p: keys for p, keys in running.items() if _needs_more(times, keys)}
            if not running:
                break
            # Those not timed yet (the sweep gave them no timing) first, then all not yet steady.
            due = [k for keys in running.values() for k in keys if not times[k]] or [
                k for keys in running.values() for k in keys if not POLICY.settled(times[k])
            ]
            for i in range(len(due)):
                key = due[(i + rotation) % len(due)]
                times[key].append(time_one(key))
            rotation += 1
    race.times.update({k: tuple(v) for k, v in times.items() if v})
    return race


def _why(why: str, race: Race, key: str) -> str:
    return why if race.timed.get(key) else f"stored on this machine, not timed again: {why}"


def _needs_more(times: dict[str, list[float]], keys: list[str]) -> bool:
    """Whether a precision's candidates still in the race need another round: some is not steady."""
    return not all(POLICY.settled(times[k]) for k in keys)


class _Fixed:
    """A test's timer (`measure(config, timing)`), in `_Timer`'s place."""

    def __init__(self, measure):
        self.measure = measure

    def __enter__(self):
        return self

    def __call__(self, config: TrialConfig, timing: int) -> float:
        return self.measure(config, timing)

    def release(self, config: TrialConfig) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


class _Timer:
    """One model per candidate: the sweep's where it was kept (`warm`), else built when first timed;
    each call times one step of it, after an untimed step at the same shape on a built model's first
    call (`ONE_STEP`), so a first call per shape (cuDNN attention's plan, a compiled graph, an
    optimizer's state) is never timed."""

    def __init__(self, configs: list[TrialConfig], warm: WarmModels | None = None):
        first = configs[0]
        self.warm, self.handed = warm, set()
        self.device = resolve_device(first.device)
        self.workload = create_workload(first.workload, first.workload_options)
        self.workload.bind_training(first.training.params())
        self.runtime = trial_runtime(self.device)
        self.configs, self.models = configs, {}

    def __enter__(self):
        self.runtime.__enter__()
        config = self.configs[0]
        self.batch = next(self.workload.train_batches(config.training.batch_size, config.seed))
        return self

    def __call__(self, config: TrialConfig, timing: int) -> float:
        model = self.models.get(id(config))
        if model is None:
            model = self.warm.take(config.knobs.as_dict()) if self.warm is not None else None
            if model is not None:  # the sweep's, stepped at this batch just now: warm
                self.handed.add(id(config))
            else:
                seed_everything(config.seed)
                model = AssembledModel(self.workload, config.knobs, config.training, self.device)
            self.models[id(config)] = model
        warm = timing > 0 or id(config) in self.handed
        return time_model(model, self.batch, ONE_STEP.timed_only() if warm else ONE_STEP).best_ms

    def release(self, config: TrialConfig) -> None:
        self.models.pop(id(config), None)

    def __exit__(self, *exc) -> None:
        self.models.clear()
        self.runtime.__exit__(*exc)
