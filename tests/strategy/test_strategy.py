"""`study.strategy: probe_first`'s decision: ranking on interleaved timings, ties within noise going
to the combination closest to the reference, K kept per precision, and what the sampler then sees.
Timings here are given, never measured: the ranking must not depend on this machine's noise."""

from __future__ import annotations

import os

import optuna
import pytest

from hpo.config.space import parse_space
from hpo.config.trial import Knobs
from hpo.errors import UserInputError
from hpo.reporting import decision_note
from hpo.strategy import SweepRow, Timing, make_decision, rank_precision, rejected_lines
from hpo.strategy import _probe_first as probe_first
from hpo.strategy._race import POLICY
from hpo.study._suggest import suggest_kept

SPACE = {
    "study": {"name": "pf", "strategy": "probe_first", "keep_fastest": 2},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2},
    "params": {"lr": 1.0e-3, "batch_size": 8},
    "systems": {"precision": ["fp32", "bf16"], "attention": ["eager", "sdpa"], "optimizer": ["forloop", "fused"]},
}


def _knobs(precision="fp32", attention="eager", optimizer="forloop"):
    return Knobs(precision=precision, attention=attention, optimizer=optimizer).as_dict()


def test_strategy_keys_default_to_joint_and_one_kept():
    spec = parse_space({**SPACE, "study": {"name": "x"}}, source="t").study
    assert (spec.strategy, spec.keep_fastest) == ("joint", 1)


@pytest.mark.parametrize("bad", [{"strategy": "probe"}, {"keep_fastest": 0}])
def test_bad_strategy_keys_are_refused(bad):
    with pytest.raises(UserInputError, match="study"):
        parse_space({**SPACE, "study": {"name": "x", **bad}}, source="t")


def test_a_combination_within_noise_of_the_fastest_ties_and_the_simpler_wins():
    fused_sdpa = Timing(_knobs(attention="sdpa", optimizer="fused"), (9.6, 9.7, 9.8))
    reference = Timing(_knobs(), (10.0, 10.1, 10.0))  # 3% slower: within the 5% floor
    ranked = rank_precision([fused_sdpa, reference])
    assert [r.timing for r in ranked] == [reference, fused_sdpa]
    assert ranked[0].tied_with == (fused_sdpa.knobs,)


def test_a_difference_beyond_noise_is_not_a_tie():
    fused = Timing(_knobs(optimizer="fused"), (8.0, 8.1, 8.0))
    reference = Timing(_knobs(), (10.0, 10.1, 10.0))  # 25% slower, repeats within 1%
    ranked = rank_precision([reference, fused])
    assert [r.timing for r in ranked] == [fused, reference] and ranked[0].tied_with == ()


def test_noisy_repeats_widen_the_tie():
    fused = Timing(_knobs(optimizer="fused"), (8.0, 9.6, 8.5))  # spread 19%
    reference = Timing(_knobs(), (9.5, 9.6, 9.5))  # 12% slower than fused's median: within its spread
    assert rank_precision([fused, reference])[0].timing is reference


def _rows():
    ok = [
        SweepRow(_knobs(p, a, o), "ok", 1.0, 1.0, 1.0, 0.0, 0.0, False)
        for p in ("fp32", "bf16")
        for a in ("eager", "sdpa")
        for o in ("forloop", "fused")
    ]
    return [
        *ok[:4],
        *(SweepRow(r.knobs, "slow: precision=bf16: 18x fp32", None, None, None, None, None, False) for r in ok[4:6]),
        *ok[6:],
    ]


def test_decision_keeps_k_per_precision_from_interleaved_repeats(monkeypatch):
    """The timer is replaced: fp32 sdpa/fused is clearly fastest; bf16's two verified ones tie."""
    speed = {("fp32", "sdpa", "fused"): 5.0, ("fp32", "eager", "fused"): 7.0, ("fp32", "sdpa", "forloop"): 8.0}
    seen = []

    def measure(config, repeat):
        k = config.knobs
        seen.append((repeat, k.precision, k.attention, k.optimizer))
        return speed.get((k.precision, k.attention, k.optimizer), 10.0)

    space = parse_space(SPACE, source="t")
    decided = make_decision(space, _rows(), keep=2, measure=measure)
    kept = [(k["knobs"]["precision"], k["knobs"]["attention"], k["knobs"]["optimizer"], k["rank"]) for k in decided["kept"]]
    assert kept == [
        ("bf16", "sdpa", "forloop", 1),
        ("bf16", "sdpa", "fused", 2),
        ("fp32", "sdpa", "fused", 1),
        ("fp32", "eager", "fused", 2),
    ]
    # Interleaved: every round times every candidate still racing once before the next round starts.
    rounds = [r for r, *_ in seen]
    assert rounds == sorted(rounds)
    # Raced (no sweep timings here): fp32 eager/forloop (10 ms) and sdpa/forloop (8 ms, 14% behind the
    # 2nd fastest) are out at their second timing, not at their first (one timing shows no noise); the
    # kept ones, bf16's two included (keep=2: both kept), are timed until steady.
    counts = {(p, a, o): sum(s[1:] == (p, a, o) for s in seen) for p, a, o in {tuple(s[1:]) for s in seen}}
    steady = POLICY.min_repeats
    assert counts == {
        ("fp32", "eager", "forloop"): 2,
        ("fp32", "sdpa", "forloop"): 2,
        ("fp32", "eager", "fused"): steady,
        ("fp32", "sdpa", "fused"): steady,
        ("bf16", "sdpa", "forloop"): steady,
        ("bf16", "sdpa", "fused"): steady,
    }
    assert sorted((d["knobs"]["attention"], d["knobs"]["optimizer"], d["round"]) for d in decided["dropped"]) == [
        ("eager", "forloop", 2),
        ("sdpa", "forloop", 2),
    ]
    assert decided["rejected"] == []  # bf16 has verified combinations; eager was only slow with bf16
    note = decision_note(decided)
    assert "fp32       sdpa" in note and "the simpler ranks first" in note and "| bf16 | 1 | sdpa | forloop |" in note


def test_rejected_values_each_get_a_line_saying_why():
    rows = [{"knobs": _knobs(p), "verdict": "ok" if p == "fp32" else f"slow: precision={p}: 18x"} for p in ("fp32", "bf16")]
    assert rejected_lines(rows, {"precision": ["fp32", "bf16"], "attention": ["eager"]}) == [
        "precision=bf16: slow: precision=bf16: 18x"
    ]


def test_sampler_searches_precision_and_rank_only_among_the_kept():
    kept = [
        {"knobs": _knobs("fp32"), "rank": 1},
        {"knobs": _knobs("fp32", "sdpa"), "rank": 2},
        {"knobs": _knobs("bf16"), "rank": 1},
    ]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    picked = [suggest_kept(study.ask(), kept) for _ in range(20)]
    assert {(p["knobs"]["precision"], p["rank"]) for p in picked} == {("fp32", 1), ("fp32", 2), ("bf16", 1)}
    assert set().union(*(t.params for t in study.trials)) == {"precision", "kept_rank_fp32"}
    one = optuna.create_study().ask()
    assert suggest_kept(one, kept[:1]) == kept[0] and one.params == {}  # nothing left to search


def _study_and_fake_sweep(tmp_path, monkeypatch, fail: list[bool]):
    from hpo.study import create_or_resume

    space = parse_space(SPACE, source="t")
    study = create_or_resume(space, f"sqlite:///{tmp_path / 'pf.db'}")
    swept = []

    def fake_sweep(space, store, machine=None, memory=True, policy=None, warm=None):
        swept.append(1)
        if fail and fail.pop(0):
            raise RuntimeError("device lost")
        return _rows()

    monkeypatch.setattr(probe_first, "sweep", fake_sweep)
    monkeypatch.setattr(
        probe_first,
        "make_decision",
        lambda space, rows, keep, machine=None, warm=None: {"kept": [{"knobs": _knobs(), "rank": 1}], "rejected": []},
    )
    monkeypatch.setattr(probe_first, "decision_note", lambda decided: "decided")
    return study, space, swept


def test_a_failed_sweep_stops_the_waiting_workers_and_the_next_run_sweeps_again(tmp_path, monkeypatch):
    from hpo.strategy import FAILED_ATTR

    study, space, swept = _study_and_fake_sweep(tmp_path, monkeypatch, fail=[True])
    with pytest.raises(RuntimeError, match="device lost"):
        probe_first.decide(study, space, say=lambda line: None)
    assert study.user_attrs[f"{FAILED_ATTR}0"]["error"] == "RuntimeError: device lost"
    with pytest.raises(RuntimeError, match="the sweep failed .*device lost"):  # a worker that waited on attempt 0
        probe_first._wait(study, 0, say=lambda line: None)
    assert probe_first.decide(study, space, say=lambda line: None)["kept"][0]["rank"] == 1  # attempt 1
    assert len(swept) == 2 and probe_first.decide(study, space, say=lambda line: None) and len(swept) == 2  # read, not swept


def test_a_worker_waiting_on_a_dead_sweeper_of_its_host_sweeps_itself(tmp_path, monkeypatch):
    import socket
    import subprocess

    from hpo.strategy import LOCK_ATTR

    study, space, swept = _study_and_fake_sweep(tmp_path, monkeypatch, fail=[])
    dead = subprocess.Popen(["true"])
    dead.wait()
    study.set_user_attr(f"{LOCK_ATTR}:0", {"host": socket.gethostname(), "pid": dead.pid, "at": 0})
    assert probe_first.decide(study, space, say=lambda line: None)["kept"] and swept == [1]
    assert study.user_attrs[f"{LOCK_ATTR}:1"]["pid"] == os.getpid()


def test_a_worker_that_finds_the_sweep_under_way_waits_for_its_result_and_never_sweeps(tmp_path, monkeypatch):
    import socket
    import threading

    from hpo.reporting import KEPT_ATTR
    from hpo.strategy import LOCK_ATTR

    study, space, swept = _study_and_fake_sweep(tmp_path, monkeypatch, fail=[])
    study.set_user_attr(f"{LOCK_ATTR}:0", {"host": socket.gethostname(), "pid": os.getpid(), "at": 0})  # alive
    monkeypatch.setattr(probe_first, "WAIT_S", 0.05)
    result = {"kept": [{"knobs": _knobs("bf16"), "rank": 1}], "rejected": []}
    timer = threading.Timer(0.5, lambda: study.set_user_attr(KEPT_ATTR, result))
    timer.start()
    said = []
    assert probe_first.decide(study, space, say=said.append) == result and swept == []
    assert said and "waiting for the knob sweep" in said[0]
