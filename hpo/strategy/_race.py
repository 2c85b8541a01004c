"""probe_first's race: time again, one step a round interleaved across them, only the verified
combinations that could still be among their precision's `keep_fastest`, until those left are steady.

The sweep times each combination with one step (`ONE_STEP`); the race starts from that timing, drops
a candidate as soon as it provably cannot be kept (`hpo.strategy._ranking.outpaced`), and decides a
precision when every candidate left is steady under `POLICY` (`TimingPolicy.settled`): untimed steps
once per model, then repeats. A precision this machine already raced is confirmed by one timing of its
front runners instead (`_confirm`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpo.config.resolve import build_config, representative_values
from hpo.config.space import SearchSpace
from hpo.config.trial import Knobs, TrialConfig
from hpo.engine import AssembledModel
from hpo.hardware import resolve_device, seed_everything, trial_runtime
from hpo.strategy._ranking import TIE_MARGIN, Timing, outpaced, rank_precision
from hpo.strategy._warm_models import WarmModels, knobs_key
from hpo.verify.timing import DEFAULT_POLICY, ONE_STEP, time_model
from hpo.workloads.catalog import create_workload

__all__ = ["POLICY", "Race", "raced_times"]

# The race times until the candidates left are steady under this policy.
POLICY = DEFAULT_POLICY


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
    running = {p: [knobs_key(k) for k in group] for p, group in groups.items() if group}
    if not running:
        return race
    values = representative_values(space)
    configs = {knobs_key(k): build_config(space, values, Knobs(**k)) for group in groups.values() for k in group}
    with _Timer(list(configs.values()), warm) if measure is None else _Fixed(measure) as timer:
        racing = _Racing(race, configs, timer, first or {})
        for precision, keys in running.items():
            if prior and all(k in prior for k in keys):
                racing.times.update(_confirm(race, precision, keys, prior, keep, racing.time_one, racing.knobs_of))
        racing.run(running, keep)
    race.times.update({k: tuple(v) for k, v in racing.times.items() if v})
    return race


class _Racing:
    """One race under way: each candidate's config and times so far, and the timer that steps them;
    what it timed and dropped goes into `race`."""

    def __init__(self, race: Race, configs: dict[str, TrialConfig], timer, first: dict) -> None:
        self.race, self.configs, self.timer = race, configs, timer
        self.times: dict[str, list[float]] = {key: list(first.get(key, ())) for key in configs}

    def time_one(self, key: str) -> float:
        ms = self.timer(self.configs[key], self.race.timed.get(key, 0))
        self.race.timed[key] = self.race.timed.get(key, 0) + 1
        return ms

    def knobs_of(self, key: str) -> dict:
        return self.configs[key].knobs.as_dict()

    def run(self, running: dict[str, list[str]], keep: int) -> None:
        """Round after round: drop the outpaced, then time once more each candidate still due,
        until every precision's candidates left are steady."""
        rotation = 0
        while True:
            running = {precision: self._drop_outpaced(keys, keep) for precision, keys in running.items()}
            running = {precision: keys for precision, keys in running.items() if _needs_more(self.times, keys)}
            if not running:
                return
            self._time_round(running, rotation)
            rotation += 1

    def _drop_outpaced(self, keys: list[str], keep: int) -> list[str]:
        """The candidates of one precision left after dropping those that cannot be kept."""
        out = outpaced({k: tuple(self.times[k]) for k in keys if self.times[k]}, keep)
        self.race.dropped += [self._dropped(k, why) for k, why in out.items()]
        for k in out:
            self.timer.release(self.configs[k])  # a dropped candidate is timed no more: its model goes now
        return [k for k in keys if k not in out]

    def _dropped(self, key: str, why: str) -> dict:
        times = self.times[key]
        return {"knobs": self.knobs_of(key), "round": len(times), "reason": _why(why, self.race, key), "times_ms": list(times)}

    def _time_round(self, running: dict[str, list[str]], rotation: int) -> None:
        """One step each of those due, starting at a rotated position. Those not timed yet (the sweep
        gave them no timing) are due first, then all not yet steady."""
        candidates = [k for keys in running.values() for k in keys]
        due = [k for k in candidates if not self.times[k]] or [k for k in candidates if not POLICY.settled(self.times[k])]
        for i in range(len(due)):
            key = due[(i + rotation) % len(due)]
            self.times[key].append(self.time_one(key))


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
