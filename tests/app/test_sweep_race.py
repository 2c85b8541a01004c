"""probe_first's re-timing races the verified combinations: each is timed once, then only those
that could still be among the `keep_fastest` of their precision are timed again, and every drop is
recorded with its round, reason and times. Step times are given by a fake timer, never measured."""

from __future__ import annotations

from hpo.app import probe_first
from hpo.app.sweep import SweepRow
from hpo.config.space import parse_space
from hpo.reporting.sweep_decision import decision_note
from hpo.study.strategy import TIE_MARGIN, outpaced

SPACE = {
    "study": {"name": "race", "strategy": "probe_first"},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2},
    "params": {"lr": 1.0e-3, "batch_size": 8},
    "systems": {"precision": ["fp32"], "attention": ["eager", "sdpa"], "optimizer": ["forloop", "fused"]},
}


def _knobs(attention="eager", optimizer="forloop"):
    return {"precision": "fp32", "attention": attention, "optimizer": optimizer, "grad_checkpointing": False, "compile": False}


def _rows(*pairs):
    return [SweepRow(_knobs(a, o), "ok", 100.0, 1.0, 1.0, 0.0, 0.0, False) for a, o in pairs]


def _decide(step_ms: dict, keep: int = 1):
    """The decision over `step_ms`'s combinations, each timed at its given ms; returns it and the timings."""
    seen = []

    def measure(config, repeat):
        seen.append((repeat, config.knobs.attention, config.knobs.optimizer))
        return step_ms[(config.knobs.attention, config.knobs.optimizer)]

    decided = probe_first.make_decision(parse_space(SPACE, source="t"), _rows(*step_ms), keep=keep, measure=measure)
    return decided, seen


def test_a_clearly_slower_combination_is_timed_once_and_dropped_with_its_reason():
    decided, seen = _decide({("eager", "forloop"): 10.0, ("eager", "fused"): 10.2, ("sdpa", "forloop"): 15.0})
    assert sum(s[1:] == ("sdpa", "forloop") for s in seen) == 1
    assert sum(s[1:] == ("eager", "forloop") for s in seen) == probe_first.REPEATS  # the close ones race on
    [dropped] = decided["dropped"]
    assert (dropped["knobs"], dropped["round"], dropped["times_ms"]) == (_knobs("sdpa"), 1, [15.0])
    assert "tie margin" in dropped["reason"] and "15 ms" in dropped["reason"] and "10 ms" in dropped["reason"]
    assert decided["tie_margin"] == TIE_MARGIN
    assert "sdpa forloop: round 1" in decision_note(decided)  # the study note says it too
    assert decided["kept"][0]["knobs"] == _knobs()  # a tie within the margin: the simpler wins


def test_close_combinations_are_kept_and_timed_in_every_round():
    step_ms = {("eager", "forloop"): 10.0, ("eager", "fused"): 10.4, ("sdpa", "fused"): 10.8}
    decided, seen = _decide(step_ms)
    assert decided["dropped"] == []
    assert len(seen) == 3 * probe_first.REPEATS
    assert all(len(line["times_ms"]) == probe_first.REPEATS for line in decided["ranking"])  # the raw repeats, kept


def test_repeats_that_agree_narrow_the_bound_until_a_close_loser_drops():
    one = {"a": (10.0,), "b": (11.2,)}  # 12% behind: within a single steady timing's noise
    assert outpaced(one, keep=1, single_noise=0.10) == {}
    two = {"a": (10.0, 10.0), "b": (11.2, 11.3)}  # the repeats agree within 1%: now provably behind
    assert set(outpaced(two, keep=1, single_noise=0.10)) == {"b"}
    noisy = {"a": (10.0, 10.0), "b": (11.2, 13.0)}  # b's own repeats spread 16%: it might still tie
    assert outpaced(noisy, keep=1, single_noise=0.10) == {}


def test_the_race_drops_only_what_cannot_be_among_the_k_fastest():
    times = {"a": (10.0,), "b": (10.1,), "c": (30.0,)}
    assert set(outpaced(times, keep=2, single_noise=0.10)) == {"c"}
    assert outpaced(times, keep=3, single_noise=0.10) == {}  # all three are kept anyway


def test_a_dropped_combination_keeps_its_verdict_a_slow_one_comes_only_from_the_proof():
    """Leaving the race is no verdict: a combination 20x slower is dropped from the re-timing, ranked
    last and still `ok`; only the probe's steady slow proof (`hpo.verify.slow_proof.prove_slow`) gives `slow`."""
    decided, seen = _decide({("eager", "forloop"): 10.0, ("eager", "fused"): 200.0, ("sdpa", "forloop"): 10.1})
    assert [d["knobs"]["optimizer"] for d in decided["dropped"]] == ["fused"]
    assert decided["rejected"] == [] and "slow" not in decided["table"]
    assert decided["ranking"][-1]["knobs"] == _knobs(optimizer="fused") and decided["ranking"][-1]["step_ms"] == 200.0
