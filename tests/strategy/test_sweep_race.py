"""probe_first's race: it starts from each verified combination's one timing in the sweep, times
again only those that could still be among the `keep_fastest` of their precision, until those left
are steady, and records every drop with its round, reason and times. Step times are given by a fake
timer, never measured."""

from __future__ import annotations

from hpo.config.space import parse_space
from hpo.config.trial import Knobs
from hpo.reporting import decision_note
from hpo.strategy import TIE_MARGIN, SweepRow, make_decision, outpaced
from hpo.strategy._race import POLICY

SPACE = {
    "study": {"name": "race", "strategy": "probe_first"},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2},
    "params": {"lr": 1.0e-3, "batch_size": 8},
    "systems": {"precision": ["fp32"], "attention": ["eager", "sdpa"], "optimizer": ["forloop", "fused"]},
}


def _knobs(attention="eager", optimizer="forloop"):
    return Knobs(precision="fp32", attention=attention, optimizer=optimizer).as_dict()


def _rows(*pairs, swept=None):
    """Verified rows; `swept` gives a row's one timing in the sweep (ms), where it has one."""
    swept = swept or {}
    return [
        SweepRow(_knobs(a, o), "ok", 100.0, 1.0, 1.0, 0.0, 0.0, False, steps_ms=[swept[(a, o)]] if (a, o) in swept else None)
        for a, o in pairs
    ]


def _decide(step_ms: dict, keep: int = 1, swept=None):
    """The decision over `step_ms`'s combinations, each timed at its given ms (`swept`: their one
    timing in the sweep); returns it and the race's timings."""
    seen = []

    def measure(config, timing):
        seen.append((timing, config.knobs.attention, config.knobs.optimizer))
        return step_ms[(config.knobs.attention, config.knobs.optimizer)]

    rows = _rows(*step_ms, swept=swept)
    decided = make_decision(parse_space(SPACE, source="t"), rows, keep=keep, measure=measure)
    return decided, seen


def _count(seen, attention, optimizer="forloop"):
    return sum(s[1:] == (attention, optimizer) for s in seen)


def test_the_race_starts_from_the_sweeps_timing_and_drops_a_clear_loser_at_its_second():
    step_ms = {("eager", "forloop"): 10.0, ("eager", "fused"): 10.2, ("sdpa", "forloop"): 15.0}
    decided, seen = _decide(step_ms, swept=step_ms)
    assert _count(seen, "sdpa") == 1  # the sweep's timing and one more: then provably behind
    [dropped] = decided["dropped"]
    assert (dropped["knobs"], dropped["round"], dropped["times_ms"]) == (_knobs("sdpa"), 2, [15.0, 15.0])
    assert "tie margin" in dropped["reason"] and "15 ms" in dropped["reason"] and "10 ms" in dropped["reason"]
    assert decided["tie_margin"] == TIE_MARGIN
    assert "sdpa forloop: after 2" in decision_note(decided)  # the study note says it too
    # The close ones race until steady: the sweep's timing and the race's make min_repeats.
    assert _count(seen, "eager") == _count(seen, "eager", "fused") == POLICY.min_repeats - 1
    assert decided["timings"] == len(seen) == 5
    assert decided["kept"][0]["knobs"] == _knobs()  # a tie within the margin: the simpler wins


def test_one_timing_never_drops_a_candidate():
    """A single step 7.8x its model's speed was seen (the quickstart's reference, 233 ms against 30):
    a combination whose sweep step met such an outlier is timed again, and ranked on its speed."""
    step_ms = {("eager", "forloop"): 30.0, ("sdpa", "forloop"): 29.0}
    decided, seen = _decide(step_ms, swept={("eager", "forloop"): 233.0, ("sdpa", "forloop"): 29.0})
    assert _count(seen, "eager") >= 2 and not [d for d in decided["dropped"] if d["knobs"] == _knobs()]
    assert decided["kept"][0]["knobs"] == _knobs()  # 30 against 29 ms: a tie, the reference's values win


def test_close_combinations_are_kept_and_timed_until_steady():
    step_ms = {("eager", "forloop"): 10.0, ("eager", "fused"): 10.4, ("sdpa", "fused"): 10.8}
    decided, seen = _decide(step_ms)
    assert decided["dropped"] == []
    assert len(seen) == 3 * POLICY.min_repeats
    assert all(len(line["times_ms"]) == POLICY.min_repeats for line in decided["ranking"])  # the raw repeats, kept


def test_a_lone_combination_is_timed_until_steady_too():
    """The kept combinations are timed under the steady rules, even one alone in its precision."""
    decided, seen = _decide({("sdpa", "fused"): 10.0}, swept={("sdpa", "fused"): 10.5})
    assert len(seen) == POLICY.min_repeats - 1
    assert decided["ranking"][0]["times_ms"] == [10.5, 10.0, 10.0]
    # A sweep step 20% slower leaves the fastest three apart by more than the steady spread: once more.
    decided, seen = _decide({("sdpa", "fused"): 10.0}, swept={("sdpa", "fused"): 12.0})
    assert decided["ranking"][0]["times_ms"] == [12.0, 10.0, 10.0, 10.0]


def test_a_noisy_candidate_is_timed_at_most_max_repeats_times():
    noisy = iter([100.0 * 0.8**i for i in range(20)])  # each 20% faster: the fastest three never agree

    def measure(config, timing):
        return next(noisy)

    rows = _rows(("eager", "forloop"))
    decided = make_decision(parse_space(SPACE, source="t"), rows, keep=1, measure=measure)
    assert len(decided["ranking"][0]["times_ms"]) == POLICY.max_repeats  # never steady: capped


def test_repeats_that_agree_narrow_the_bound_until_a_close_loser_drops():
    one = {"a": (10.0,), "b": (30.0,)}  # 3x behind on one timing each: one step shows no noise
    assert outpaced(one, keep=1) == {}
    two = {"a": (10.0, 10.0), "b": (11.2, 11.3)}  # the repeats agree within 1%: now provably behind
    assert set(outpaced(two, keep=1)) == {"b"}
    noisy = {"a": (10.0, 10.0), "b": (11.2, 13.0)}  # b's own repeats spread 16%: it might still tie
    assert outpaced(noisy, keep=1) == {}
    outlier = {"a": (10.0, 10.0), "b": (90.0, 11.2, 11.3, 11.2)}  # noise is the spread of the fastest 3
    assert set(outpaced(outlier, keep=1)) == {"b"}


def test_the_race_drops_only_what_cannot_be_among_the_k_fastest():
    times = {"a": (10.0, 10.0), "b": (10.1, 10.1), "c": (30.0, 30.0)}
    assert set(outpaced(times, keep=2)) == {"c"}
    assert outpaced(times, keep=3) == {}  # all three are kept anyway


def test_a_dropped_combination_keeps_its_verdict_a_slow_one_comes_only_from_the_proof():
    """Leaving the race is no verdict: a combination 20x slower is dropped from the re-timing, ranked
    last and still `ok`; only the probe's steady slow proof (`hpo.verify.timing._slow_proof.prove_slow`) gives `slow`."""
    decided, seen = _decide({("eager", "forloop"): 10.0, ("eager", "fused"): 200.0, ("sdpa", "forloop"): 10.1})
    assert [d["knobs"]["optimizer"] for d in decided["dropped"]] == ["fused"]
    assert decided["rejected"] == [] and "slow" not in decided["table"]
    assert decided["ranking"][-1]["knobs"] == _knobs(optimizer="fused") and decided["ranking"][-1]["step_ms"] == 200.0
