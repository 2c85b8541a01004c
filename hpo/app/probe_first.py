"""Run `study.strategy: probe_first`'s opening sweep, once per study, and store its decision.

`decide(study, space)` is called by `hpo run` and `hpo worker` before any trial starts. The first
worker to insert the study attr `LOCK_ATTR` (insert-if-absent: atomic in an RDB storage) runs the
sweep of `hpo probe` (`hpo.app.sweep`, its verdicts going to the study's verdict cache), times the
verified combinations again with repeats interleaved across them, ranks them
(`hpo.study.strategy.rank_precision`), stores the decision under `KEPT_ATTR` and writes the study
note. Every other worker waits until the decision is stored and reads it: the sweep never runs
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
from hpo.config.resolve import build_config, representative_values
from hpo.config.space import SearchSpace
from hpo.config.trial import Knobs, TrialConfig
from hpo.engine.assembly import AssembledModel
from hpo.hardware.runtime import resolve_device, seed_everything, trial_runtime
from hpo.knobs.registry import KNOB_NAMES
from hpo.reporting.notes import DashboardNotes
from hpo.reporting.sweep_decision import KEPT_ATTR, decision_note
from hpo.storage.optuna_compat import add_study_user_attr
from hpo.study.strategy import FAILED_ATTR, LOCK_ATTR, TIE_MARGIN, Timing, kept_of, outpaced, rank_precision, rejected_lines
from hpo.verify.cache import StudyVerdicts
from hpo.verify.machine_facts import MachineFacts
from hpo.verify.steady import DEFAULT_POLICY, time_model
from hpo.workloads.catalog import create_workload

__all__ = ["NothingVerified", "Race", "decide", "make_decision", "raced_times"]

REPEATS = 3  # rounds over the candidates; each round times every candidate once, in a rotated order
# Each round's timing of a candidate: untimed steps at its shape first, then repeats until steady;
# its fastest step counts (noise only ever adds time). See `hpo.verify.steady`.
POLICY = DEFAULT_POLICY
# Timed again: the combinations the sweep measured within this factor of their precision's fastest.
# The sweep's single timings varied by up to 25% on a quiet host (FINDINGS), and by 5x on a host
# shared with other jobs (a 12-combination sweep of bench-vs-hf's GPT, 2026-11-25): only a
# combination far slower than that is left out.
WINDOW = 3.0
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
        decided = make_decision(
            space, sweep(space, StudyVerdicts(study), machine=machine, memory=False), space.study.keep_fastest, machine=machine
        )
    except BaseException as exc:  # the waiting workers must learn it, or they would wait forever
        add_study_user_attr(study, f"{FAILED_ATTR}{attempt}", {"error": f"{type(exc).__name__}: {exc}"[:500]})
        raise
    study.set_user_attr(KEPT_ATTR, decided)
    _save_note(study)
    say(decision_note(decided))
    return decided


def make_decision(space: SearchSpace, rows: list[SweepRow], keep: int, measure=None, machine: MachineFacts | None = None) -> dict:
    """Rank the verified rows per precision on raced, interleaved timings; keep `keep` of each.
    Rows this machine already raced (`known_ms`) are confirmed by one timing of their precision's
    front runners instead (`raced_times`); with `machine`, each row's raced times are stored for the
    next study."""
    by_precision: dict[str, list[SweepRow]] = {}
    for row in rows:
        if row.verdict == "ok":
            by_precision.setdefault(row.knobs["precision"], []).append(row)
    started, batch = time.perf_counter(), _batch_size(space)
    groups = {p: [r.knobs for r in _contenders(group)] for p, group in sorted(by_precision.items())}
    prior = {_key(r.knobs): tuple(r.known_ms) for r in rows if r.known_ms}
    race = raced_times(space, {p: g for p, g in groups.items() if g}, keep, measure, prior)
    if machine is not None:
        for row in rows:
            if row.machine_key and _key(row.knobs) in race.times:
                machine.update(row.machine_key, raced_ms=list(race.times[_key(row.knobs)]))
    ranked = {
        precision: rank_precision([Timing(r.knobs, race.times.get(_key(r.knobs)) or (_sweep_ms(r, batch),)) for r in group])
        for precision, group in sorted(by_precision.items())
    }
    return {
        "kept": kept_of(ranked, keep),
        "table": table(rows),
        "ranking": [_ranking_line(p, r) for p, rs in ranked.items() for r in rs],
        "rejected": rejected_lines([{"knobs": r.knobs, "verdict": r.verdict} for r in rows], space.systems),
        "keep_fastest": keep,
        "repeats": REPEATS,
        "timing": POLICY.record(),
        "timed_again_s": time.perf_counter() - started,
        "window": WINDOW,
        "tie_margin": TIE_MARGIN,
        "dropped": _window_dropped(by_precision, groups, batch) + race.dropped,
        "confirmed": race.confirmed,
        "from_machine": sum(r.from_machine for r in rows),
    }


def _confirm(race: Race, precision: str, keys: list[str], prior: dict, keep: int, time_one, knobs_of) -> bool:
    """Race one precision on this machine's stored times: those that cannot be among the `keep`
    fastest on them are dropped (round 0), the others timed once now. True when these confirming
    timings agree with the stored race: none faster than its stored fastest by more than a single
    timing's noise (at least the tie margin; noise only adds time, so a stored fastest that is beaten
    was not this machine's speed), and all slowed alike, within that noise (a busier machine slows
    every candidate; a changed one reorders them). The stored race then stands, each new timing added
    to its repeats. False (nothing kept in `race`) otherwise: the precision is raced anew."""
    stored = {k: prior[k] for k in keys}
    out = outpaced(stored, keep, POLICY.steady_spread)
    front = [k for k in keys if k not in out]
    now = {k: time_one(k) for k in front}
    noise = 1 + max(TIE_MARGIN, POLICY.steady_spread)
    slowed = [now[k] / min(stored[k]) for k in front]
    if min(slowed) * noise < 1 or max(slowed) > min(slowed) * noise:
        return False
    race.times.update({k: (*stored[k], now.get(k)) if k in now else stored[k] for k in keys})
    race.dropped += [
        {"knobs": knobs_of(k), "round": 0, "reason": f"stored on this machine: {why}", "times_ms": list(stored[k])}
        for k, why in out.items()
    ]
    race.confirmed[precision] = now
    return True


def _window_dropped(by_precision: dict[str, list[SweepRow]], groups: dict[str, list[dict]], batch: int) -> list[dict]:
    """Round 0 of the race: the verified rows the sweep's own timing left out of it (over WINDOW)."""
    dropped = []
    for precision, group in by_precision.items():
        timed = {_key(k) for k in groups.get(precision, [])}
        for row in group:
            if len(group) > 1 and _key(row.knobs) not in timed:
                why = f"the sweep timed it over {WINDOW:g}x its precision's fastest: not timed again"
                dropped.append({"knobs": row.knobs, "round": 0, "reason": why, "times_ms": [_sweep_ms(row, batch)]})
    return dropped


def _batch_size(space: SearchSpace) -> int:
    knobs = Knobs(**{k: v[0] for k, v in space.systems.items()})
    return build_config(space, representative_values(space), knobs).training.batch_size


def _sweep_ms(row: SweepRow, batch_size: int) -> float:
    """The sweep's own step time, for a combination not timed again."""
    return 1000.0 * batch_size / row.samples_per_s if row.samples_per_s else float("inf")


def _contenders(group: list[SweepRow]) -> list[SweepRow]:
    """The ones worth timing again: within WINDOW of the fastest by the sweep; none if alone."""
    fastest = max((r.samples_per_s or 0.0) for r in group)
    close = [r for r in group if not r.samples_per_s or r.samples_per_s * WINDOW >= fastest]
    return close if len(close) > 1 else []


def _key(knobs: dict) -> str:
    return "/".join(str(knobs[k]) for k in KNOB_NAMES)


def _ranking_line(precision: str, ranked) -> dict:
    timing = ranked.timing
    return {
        "precision": precision,
        "rank": ranked.rank,
        "knobs": timing.knobs,
        "step_ms": timing.median_ms,
        "spread": timing.spread,
        "times_ms": list(timing.times_ms),  # the repeats it was ranked on: how a tie came about
        "tied_with": [_key(k) for k in ranked.tied_with],
    }


@dataclass
class Race:
    """Each candidate's step times, one per round it ran (`times`), and the candidates dropped from
    the race: at which round, why and on which times (`dropped`)."""

    times: dict[str, tuple[float, ...]] = field(default_factory=dict)
    dropped: list[dict] = field(default_factory=list)
    # Per precision decided from this machine's stored times: the confirming timings (ms).
    confirmed: dict[str, dict[str, float]] = field(default_factory=dict)


def raced_times(space: SearchSpace, groups: dict[str, list[dict]], keep: int, measure=None, prior=None) -> Race:
    """Time each precision's candidates (`groups`) in up to `REPEATS` rounds, racing: round r times
    every candidate still in the race once, starting at a rotated position (so a machine that slows
    down for a while slows every candidate alike); after each round a candidate that provably cannot
    be among its precision's `keep` fastest (`hpo.study.strategy.outpaced`) leaves the race, and a
    precision with no more than `keep` left is decided. A precision whose every candidate has
    `prior` times (this machine's, from an earlier study) is raced on them instead, after one
    confirming timing of those still in front (`_confirm`). `measure(config, round)` is the timer;
    tests replace it."""
    race = Race()
    candidates = [k for group in groups.values() if len(group) > keep for k in group]
    if not candidates:
        return race
    values = representative_values(space)
    configs = {_key(k): build_config(space, values, Knobs(**k)) for k in candidates}
    # A precision with no more than `keep` candidates keeps them all: nothing to time.
    running = {p: [_key(k) for k in group] for p, group in groups.items() if len(group) > keep}
    times: dict[str, list[float]] = {key: [] for key in configs}
    with _Timer(list(configs.values())) if measure is None else _Fixed(measure) as timer:
        for precision, keys in list(running.items()):
            if (
                prior
                and all(k in prior for k in keys)
                and _confirm(
                    race, precision, keys, prior, keep, lambda k: timer(configs[k], 0), lambda k: configs[k].knobs.as_dict()
                )
            ):
                running.pop(precision)
                times.update({k: list(race.times[k]) for k in keys})
        for repeat in range(REPEATS):
            now = [key for keys in running.values() for key in keys]
            for i in range(len(now)):
                key = now[(i + repeat) % len(now)]
                times[key].append(timer(configs[key], repeat))
            for precision, keys in running.items():
                out = outpaced({k: tuple(times[k]) for k in keys}, keep, POLICY.steady_spread)
                race.dropped += [
                    {"knobs": configs[k].knobs.as_dict(), "round": repeat + 1, "reason": why, "times_ms": list(times[k])}
                    for k, why in out.items()
                ]
                running[precision] = [k for k in keys if k not in out]
            running = {p: keys for p, keys in running.items() if len(keys) > keep}
    race.times.update({k: tuple(v) for k, v in times.items() if v})
    return race


class _Fixed:
    def __init__(self, measure):
        self.measure = measure

    def __enter__(self):
        return self.measure

    def __exit__(self, *exc) -> None:
        return None


class _Timer:
    """One model per candidate, built once; each call times it until steady (`hpo.verify.steady`),
    its untimed steps first, so a first call per shape (cuDNN attention's plan) is never timed."""

    def __init__(self, configs: list[TrialConfig]):
        first = configs[0]
        self.device = resolve_device(first.device)
        self.workload = create_workload(first.workload, first.workload_options)
        self.workload.bind_training(first.training.params())
        self.runtime = trial_runtime(self.device)
        self.configs, self.models = configs, {}

    def __enter__(self):
        self.runtime.__enter__()
        config = self.configs[0]
        self.batch = next(self.workload.train_batches(config.training.batch_size, config.seed))
        for config in self.configs:
            seed_everything(config.seed)
            self.models[id(config)] = AssembledModel(self.workload, config.knobs, config.training, self.device)
        return self

    def __call__(self, config: TrialConfig, repeat: int) -> float:
        # Each model ran its untimed steps at this shape in the first round: later rounds only time.
        policy = POLICY if repeat == 0 else POLICY.timed_only()
        return time_model(self.models[id(config)], self.batch, policy).best_ms

    def __exit__(self, *exc) -> None:
        self.models.clear()
        self.runtime.__exit__(*exc)


def _save_note(study: optuna.Study) -> None:
    DashboardNotes().update_study_note(study)  # study_note() starts with the decision
