"""scripts/bench-vs-hf end to end at its smallest (1 trial x 2 steps, 32 eval texts), on each task:
both sides train, and the JSON holds every figure of the table; plus the tasks against hpo's own files."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.vs_hf_report import ROWS
from benchmarks.vs_hf_task import WORKLOADS, SearchTask, hpo_space
from hpo.config.space import parse_space

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench-vs-hf"
# Present with one trial; "later trials" and "between trials" need a second one.
ONE_TRIAL_METRICS = ("wall_s", "startup_s", "first_trial_s", "after_last_s", "samples_per_s", "outside_steps_s")


def test_text_classification_task_matches_hpos_shipped_space_and_workload_defaults():
    from hpo.workloads.options.text_classification import TextClassificationOptions
    from hpo.workloads.text_classification import EVAL_BATCH_SIZE

    shipped = yaml.safe_load((ROOT / "search_spaces" / "text_classification.yaml").read_text())
    task, options = SearchTask(steps=WORKLOADS["text_classification"].lengths["default"], trials=2), TextClassificationOptions()
    assert task.steps == shipped["workload"]["max_steps"]
    assert (task.weight_decay, task.spec.warmup_steps) == (shipped["params"]["weight_decay"], shipped["params"]["warmup_steps"])
    assert (task.options()["dropout"], task.options()["attention_dropout"], task.spec.eval_batch_size) == (
        options.dropout,
        options.attention_dropout,
        EVAL_BATCH_SIZE,
    )
    space = parse_space(hpo_space(task, "vs-hf"), "vs-hf")
    assert space.study.n_trials == 2 and space.study.pruner.name == "none"


def test_causal_lm_task_matches_hpos_shipped_space_and_workload_defaults():
    from hpo.workloads.causal_lm import EVAL_BATCH_SIZE
    from hpo.workloads.options.causal_lm import CausalLMOptions

    shipped = yaml.safe_load((ROOT / "search_spaces" / "causal_lm.yaml").read_text())
    task, defaults = (
        SearchTask(workload="causal_lm", steps=WORKLOADS["causal_lm"].lengths["default"], trials=2),
        CausalLMOptions(),
    )
    assert task.steps == shipped["workload"]["max_steps"] and task.options()["seq_len"] == shipped["workload"]["seq_len"]
    assert task.weight_decay == shipped["params"]["weight_decay"] and "warmup_steps" not in shipped["params"]
    assert task.spec.lr == (shipped["params"]["lr"]["low"], shipped["params"]["lr"]["high"])
    assert {k: getattr(defaults, k) for k in task.options()} == task.options()  # the workload's defaults
    assert task.spec.eval_batch_size == EVAL_BATCH_SIZE
    assert parse_space(hpo_space(task, "vs-hf"), "vs-hf").spec.workload.name == "causal_lm"


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(WORKLOADS))
def test_bench_vs_hf_runs_both_sides_and_writes_the_table(tmp_path, task):
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--task",
        task,
        "--steps",
        "2",
        "--trials",
        "1",
        "--n-eval",
        "32",
        "--out-dir",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "KINETO_LOG_LEVEL": "5"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    (out,) = tmp_path.glob(f"vs-hf-{task}-2-steps-*.json")
    result = json.loads(out.read_text())

    assert [(r["side"], r["repeat"]) for r in result["runs"]] == [("hf", 0), ("hpo", 0)]
    hf, hpo = result["runs"]
    for run in (hf, hpo):
        (trial,) = run["trials"]
        assert trial["state"] == "COMPLETE" and math.isfinite(trial["objective"]), trial
        assert trial["steps"] == 2 and trial["median_step_s"] > 0, trial
        assert run["command"] and run["wall_s"] > 0
    assert hf["trials"][0]["model_init_s"] > 0 and hf["trials"][0]["train_loop_s"] > 0 and hf["trials"][0]["eval_s"] > 0
    assert hpo["trials"][0]["verdict"] == "ok" and hpo["trials"][0]["trial_s"] > 0
    assert "hpo run" in hpo["command"] and "vs_hf_trainer" in hf["command"]

    for side in ("hf", "hpo"):
        summary = result["summary"][side]
        assert set(summary) == {metric for metric, _, _ in ROWS}
        for metric in ONE_TRIAL_METRICS:
            assert summary[metric]["median"] > 0, (side, metric, summary[metric])
    meta = result["meta"]
    assert meta["cpu_model"] and meta["cpu_count"] >= 1 and set(meta["cpu_flags"]) >= {"avx512_bf16", "amx_bf16"}
    assert meta["versions"]["torch"] and meta["versions"]["transformers"] and meta["args"]["trials"] == 1
    assert "| whole search, wall clock |" in proc.stdout and "hpo trials" in proc.stdout
    assert proc.stdout.startswith(WORKLOADS[task].caption)
