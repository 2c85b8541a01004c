"""The memory benchmarks' summaries (issue 39): checkpointing's fastest auto batch against the
plain one's (scripts/bench-memory), and the peak model's error (scripts/bench-memory-prediction)."""

from __future__ import annotations

from benchmarks.memory_budget import summarize, table


def _row(checkpointing: bool, speed: float | None, verdict: str = "ok", batch="auto", predicted=None, peak=None) -> dict:
    row = {"grad_checkpointing": checkpointing, "batch_size": batch, "verdict": verdict, "train_samples_per_s": speed}
    if predicted:
        row |= {"predicted_peak_mb": predicted, "peak_mem_mb": peak, "prediction_error": round(predicted / peak - 1, 3)}
    return row


def test_the_memory_summary_compares_the_fastest_auto_rows_and_ignores_the_rest():
    rows = {
        "bf16 on": _row(True, 286.5, predicted=25627, peak=25934),
        "fp32 on": _row(True, 120.0),
        "bf16 off": _row(False, 354.4, predicted=66631, peak=66615),
        "fp32 off": _row(False, None, verdict="oom: predicted 80 GB > limit 70 GB at batch 144 (fits up to 96)"),
        "bf16 off at 256": _row(False, 999.0, batch=256),  # a fixed batch is not an auto row
    }
    result = summarize(rows)
    assert result["best_with_checkpointing"] is rows["bf16 on"] and result["best_without_checkpointing"] is rows["bf16 off"]
    assert result["throughput_with_over_without"] == round(286.5 / 354.4, 3)
    assert result["prediction_error_range"] == [-0.012, 0.0]
    page = table({"rows": rows})
    assert "| bf16 on | ok | auto | 25627 | 25934 | -1.2% | 286.5 |" in page and "| fp32 off | oom: predicted 80 GB" in page


def test_without_an_auto_row_on_each_side_there_is_no_ratio():
    result = summarize({"on": _row(True, 10.0), "off": _row(False, None, verdict="error: exit 70")})
    assert result["throughput_with_over_without"] is None and result["prediction_error_range"] is None


def test_the_prediction_error_is_read_over_the_peak_and_over_what_the_step_adds():
    from benchmarks.memory_prediction import _errors
    from benchmarks.memory_prediction import table as prediction_table

    row = {"predicted_peak_mb": 1100.0, "peak_mem_mb": 1000.0, "memory_model": {"fixed_mb": 800.0}, "verdict": "ok"}
    assert _errors(row) == {"error": 0.1, "step_mb": 200.0, "step_error": 0.5}  # 300 MB predicted over 200 measured
    lightning = {"predicted_peak_mb": None, "peak_mem_mb": 900.0, "verdict": "ok"}  # no prediction: not hpo's loop
    assert _errors(lightning) == {}
    page = prediction_table({"rows": [{"model": "bert", "variant": "fp32", **row, **_errors(row)}]})
    assert "| bert | fp32 | ok | 1100 | 1000 | +10.0% | 200 | +50.0% |" in page
