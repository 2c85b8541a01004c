"""benchmarks.parallel: each row is a real trial of ranks whose record the benchmark reads back,
and the summary's speed-up is over the 1-rank row's median."""

from __future__ import annotations

import pytest
from parallel_ranks import no_rank_left_behind  # noqa: F401 (autouse)

from benchmarks import parallel
from benchmarks.parallel import ONE_GPU_ROW, ROWS, row_config, rows_for, summarize


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


def test_each_host_runs_the_rows_it_can_place_one_rank_per_gpu_over_nccl():
    assert rows_for("cpu", 0) == ROWS  # gloo: every row, 2 ranks on the CPU
    one_gpu = rows_for("cuda", 1)
    assert list(one_gpu) == [ONE_GPU_ROW]
    config = row_config(one_gpu[ONE_GPU_ROW], steps=3, device="cuda")
    assert (config.device, config.parallel.processes, config.parallel.backend) == ("cuda", 1, "nccl")
    several = rows_for("cuda", 4)  # the 2-rank rows wait for a host with 2 GPUs or more
    assert list(several) == list(ROWS) and {row_config(p, 3, "cuda").parallel.backend for p in several.values()} == {"nccl"}
    assert {row_config(p, 3, "cuda").parallel.processes for name, p in several.items() if name != "1 rank"} == {2}


def test_the_summary_of_a_one_gpu_host_is_against_its_one_nccl_rank():
    rows = summarize([trial(ONE_GPU_ROW, 50, 0.0), trial(ONE_GPU_ROW, 70, 0.0)])
    assert rows[0]["samples_per_s"] == 60 and rows[0]["speedup_over_1_rank"] == 1.0
