"""bench-knobs keeps every round it finished: its result goes to the caller after each round, before
the overhead figures at the end, so a time limit that cuts it short loses only the round it was in."""

from __future__ import annotations

import pytest

from benchmarks import knobs
from benchmarks.knobs import KnobsBench, run_knobs

TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 32, "eval_batches": 1}


class Cut(Exception):
    """Where the session's time limit would kill the benchmark."""


@pytest.mark.slow  # three tiny trials: about 20 s on a busy 2-core host
def test_each_round_is_handed_on_before_the_overhead_is_measured(monkeypatch):
    def cut(*args):
        raise Cut

    monkeypatch.setattr(knobs, "measure_overhead", cut)
    bench = KnobsBench(
        workload="causal_lm",
        options=TINY,
        steps=2,
        batch_size=4,
        repeats=2,
        configs=("baseline",),
        device="cpu",
        skip_slow=False,
    )
    rounds = []
    with pytest.raises(Cut):
        run_knobs(bench, log=lambda line: None, on_round=rounds.append)
    assert [r["rounds_done"] for r in rounds] == [1, 2]
    for partial in rounds:
        assert partial["overhead"] is None and partial["meta"]["repeats"] == 2
        assert [row["config"] for row in partial["rows"]] == ["baseline"]
        assert all(row["samples_per_s"] > 0 and row["verdict"] == "ok" for row in partial["rows"]), partial["rows"]
    assert [len(row["runs"]) for row in rounds[0]["rows"]] == [1]
    assert [len(row["runs"]) for row in rounds[1]["rows"]] == [2]
