"""benchmarks.parallel: each row is a real trial of ranks whose record the benchmark reads back,
and the summary's speed-up is over the 1-rank row's median."""

from __future__ import annotations

import pytest
from parallel_ranks import no_rank_left_behind  # noqa: F401 (autouse)

from benchmarks import parallel
from benchmarks.parallel import ROWS, summarize


def trial(row: str, samples_per_s: float, share: float, load: float = 2.0) -> dict:
    return {
        "row": row,
        "samples_per_s": samples_per_s,
        "collective_share": share,
        "mfu": None,
        "load_before": load,
        "load_after": load,
    }


def test_the_summary_is_each_row_s_median_over_its_rounds_against_one_rank_s():
    ddp = next(name for name in ROWS if name.startswith("DDP"))
    rows = summarize(
        [trial("1 rank", 10, 0.0), trial("1 rank", 12, 0.0), trial(ddp, 18, 0.1), trial(ddp, 22, 0.3), trial(ddp, 20, 0.2)]
    )
    assert [row["row"] for row in rows] == ["1 rank", ddp]
    assert rows[1]["samples_per_s"] == 20 and rows[1]["collective_share"] == 0.2 and rows[1]["rounds"] == 3
    assert rows[1]["speedup_over_1_rank"] == pytest.approx(20 / 11)


@pytest.mark.slow
def test_a_round_of_the_smallest_rows_runs_real_trials_of_ranks(monkeypatch):
    monkeypatch.setattr(parallel, "MODEL", {"d_model": 16, "n_layers": 2, "n_heads": 2, "seq_len": 16, "corpus_bytes": 20000})
    monkeypatch.setattr(parallel, "ROWS", {name: ROWS[name] for name in list(ROWS)[:2]})
    result = parallel.run_parallel_bench(steps=3, rounds=1)
    one, ddp = result["trials"]
    assert (one["verdict"], ddp["verdict"]) == ("ok", "ok")
    assert one["collective_share"] == 0.0 and one["wire_calls"] == {}
    assert ddp["wire_calls"]["all_reduce"] == 1 and 0 < ddp["collective_share"] <= 1
    assert result["rows"][0]["speedup_over_1_rank"] == 1.0
