"""bench-vs-bare: the meter both loops are measured with, the plain loop's refusals, and the script
end to end on a tiny causal LM (CI's smoke run: ratios printed, not asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.bare_loop import check_supported
from benchmarks.vs_bare import VsBareBench, round_order, summarize
from benchmarks.vs_bare_meter import METER, StepMeter, TimedCausalLM, Window
from hpo.config.trial import Knobs, TrialConfig
from hpo.errors import UserInputError
from hpo.workloads.options.causal_lm import CausalLMOptions

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench-vs-bare"
TINY = """\
format: 2
study: {{objectives: [val_loss], directions: [minimize], seed: 0, skip_slow: false}}
workload: {{name: causal_lm, max_steps: 8, eval_every: 8, d_model: 32, n_layers: 1, n_heads: 2, seq_len: 32, eval_batches: 1}}
params: {{lr: 0.0005, batch_size: 8, weight_decay: 0.0, warmup_steps: 0, grad_clip: 1.0}}
systems: {{precision: fp32, attention: sdpa, optimizer: fused, grad_checkpointing: {ckpt}, compile: false}}
"""


def test_throughput_is_the_samples_between_the_warmup_draw_and_the_last():
    window = Window(draws=[0.0, 5.0, 6.0, 7.0, 9.0], cpu_draws=[0.0, 1.0, 2.0, 2.5, 3.0], samples=[8, 8, 8, 8, 4])
    # draws 1..4 are 4 s apart and cover the steps of draws 1, 2 and 3: 24 samples
    assert window.samples_per_s(warmup=1) == pytest.approx(24 / 4)
    assert window.samples_per_s(warmup=3) == pytest.approx(8 / 2)  # one step: draw 3 to draw 4
    assert window.samples_per_s(warmup=4) is None  # no step between two draws past the warm-up
    assert window.samples_per_cpu_s(warmup=1) == pytest.approx(24 / 2)  # the process's CPU seconds


def test_the_training_window_is_the_iterator_drawn_from_most_and_evaluation_is_not_counted(monkeypatch):
    meter = StepMeter()
    monkeypatch.setattr("benchmarks.vs_bare_meter.METER", meter)
    workload = TimedCausalLM(CausalLMOptions(d_model=16, n_layers=1, n_heads=2, seq_len=8, corpus_bytes=4000))
    model = workload.build_model("eager")
    probe = workload.train_batches(2, 0)
    workload.training_loss(model, next(probe))  # a probe: one draw, one forward
    training = workload.train_batches(4, 0)
    for _ in range(3):
        loss = workload.training_loss(model, next(training))
    with torch.no_grad():  # an evaluation's forward: no memory sample, no loss
        workload.training_loss(model, next(training))
    meter.finish()

    assert meter.base_rss_bytes > 0
    window = meter.training_window()
    assert window is meter.windows[1] and window.samples == [4, 4, 4, 4]
    assert window.last_loss is not None and float(window.last_loss) == pytest.approx(float(loss.detach()))
    assert window.peak_bytes > 0  # sampled after the training forwards (CPU: resident set)
    assert meter.windows[0].samples == [2]
    assert METER is not meter  # the module's meter was swapped only for this test


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        (Knobs(grad_checkpointing=True), "systems.grad_checkpointing"),
        (Knobs(optimizer="apex"), "systems.optimizer"),
    ],
)
def test_the_bare_loop_refuses_knobs_it_does_not_apply(knobs, message):
    with pytest.raises(UserInputError, match=message):
        check_supported(TrialConfig(workload="causal_lm", knobs=knobs))


def test_too_few_steady_steps_is_refused_before_training(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY.format(ckpt="false"))
    with pytest.raises(UserInputError, match="--warmup must be between 1 and max_steps - 3 = 5"):
        VsBareBench(config=config, warmup=6).validate()


def test_the_summary_pairs_each_round_and_takes_the_probe_share_from_hpo():
    hpo = {"probe_s": 1.0, "trial_s": 10.0, "model_flops_per_sample": 1e9, "peak_tflops": 1.0, "mfu": 0.09}
    run = {"peak_mem_mb": 110.0, "base_mem_mb": 10.0, "last_loss": 2.0, "verdict": "ok"}
    runs = [
        {**run, "round": 1, "side": "hpo", "samples_per_s": 90.0, "hpo": hpo},
        {**run, "round": 1, "side": "bare", "samples_per_s": 100.0, "peak_mem_mb": 60.0},
    ]
    summary = summarize(runs)
    assert summary["throughput_ratio"] == pytest.approx(0.9)
    assert summary["throughput_ratio_per_round"] == [pytest.approx(0.9)]
    assert summary["peak_mem_ratio"] == pytest.approx(110 / 60)
    assert summary["mem_above_base_ratio"] == pytest.approx(100 / 50)
    assert summary["probe_share"] == pytest.approx(0.1)
    assert summary["hpo_mfu"] == pytest.approx(0.09) and summary["bare_mfu"] == pytest.approx(0.1)
    assert summary["last_loss_max_rel_diff"] == 0


def test_the_per_round_ratios_pair_each_round_by_side_whatever_side_ran_first():
    hpo = {"probe_s": 1.0, "trial_s": 10.0}
    run = {"peak_mem_mb": 110.0, "base_mem_mb": 10.0, "verdict": "ok"}
    speeds_losses = {(1, "hpo"): (90.0, 2.0), (1, "bare"): (100.0, 2.0), (2, "hpo"): (110.0, 3.0), (2, "bare"): (100.0, 2.0)}
    runs = [  # as run_vs_bare writes them: hpo first in round 1, bare first in round 2
        {
            **run,
            "round": r + 1,
            "side": side,
            "samples_per_s": speeds_losses[r + 1, side][0],
            "last_loss": speeds_losses[r + 1, side][1],
            "hpo": hpo,
        }
        for r in range(2)
        for side in round_order(r)
    ]
    assert [(row["round"], row["side"]) for row in runs] == [(1, "hpo"), (1, "bare"), (2, "bare"), (2, "hpo")]
    summary = summarize(runs)
    assert summary["throughput_ratio_per_round"] == [pytest.approx(0.9), pytest.approx(1.1)]
    assert summary["last_loss_max_rel_diff"] == pytest.approx(0.5)  # round 2: hpo 3.0 against bare 2.0


def test_a_round_cut_short_before_its_second_side_has_no_ratio():
    run = {"peak_mem_mb": 110.0, "base_mem_mb": 10.0, "verdict": "ok", "hpo": {}}
    runs = [
        {**run, "round": 1, "side": "hpo", "samples_per_s": 90.0},
        {**run, "round": 1, "side": "bare", "samples_per_s": 100.0},
        {**run, "round": 2, "side": "bare", "samples_per_s": 100.0},
    ]
    assert summarize(runs)["throughput_ratio_per_round"] == [pytest.approx(0.9)]


@pytest.mark.slow
def test_bench_vs_bare_trains_the_same_thing_both_ways_and_prints_the_ratios(tmp_path):
    config, out = tmp_path / "tiny.yaml", tmp_path / "vs-bare.json"
    config.write_text(TINY.format(ckpt="false"))
    # No --device: the config's `auto`, which both sides must record as what it resolved to.
    cmd = [sys.executable, str(SCRIPT), "--config", str(config), "--repeats", "1", "--warmup", "3"]
    proc = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True, timeout=300, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())

    hpo, bare = result["runs"]
    assert (hpo["side"], bare["side"]) == ("hpo", "bare")
    for run in (hpo, bare):
        assert run["verdict"] == "ok" and run["steps_drawn"] == 8, run
        assert run["samples_per_s"] > 0 and run["samples_per_cpu_s"] > 0 and run["peak_mem_mb"] > run["base_mem_mb"] > 0
    assert hpo["hpo"]["knobs_observed"]["optimizer"] == "fused"
    # Same initial weights, batches, knobs and clipping: both loops end on the same training loss.
    assert hpo["last_loss"] == pytest.approx(bare["last_loss"], rel=1e-4)
    summary = result["summary"]
    assert summary["throughput_ratio"] > 0 and summary["peak_mem_ratio"] > 0
    assert 0 < summary["probe_share"] < 1
    assert result["meta"]["knobs"]["precision"] == "fp32" and result["meta"]["commit"]
    assert {hpo["device"], bare["device"], result["meta"]["device"]} == {"cuda" if torch.cuda.is_available() else "cpu"}
    assert "hpo / bare throughput" in proc.stdout and "hpo / bare peak memory" in proc.stdout


def test_a_config_the_bare_loop_cannot_run_is_a_user_error(tmp_path):
    config = tmp_path / "ckpt.yaml"
    config.write_text(TINY.format(ckpt="true"))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--config", str(config), "--out", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and not (tmp_path / "x.json").exists(), proc.stderr
    assert "systems.grad_checkpointing" in proc.stderr


def _tiny_config(**knobs) -> TrialConfig:
    from hpo.config.trial import TrainingConfig

    options = {"d_model": 16, "n_layers": 1, "n_heads": 2, "seq_len": 16, "corpus_bytes": 4000, "eval_batches": 1}
    return TrialConfig(
        workload="causal_lm", workload_options=options, training=TrainingConfig(batch_size=2, max_steps=2), knobs=Knobs(**knobs)
    )


@pytest.mark.parametrize(
    ("knobs", "kernel"),
    [
        ({"attention": "sdpa_math"}, "aten::_scaled_dot_product_attention_math"),  # the pin holds in forward and backward
        ({"attention": "sdpa"}, "aten::_scaled_dot_product_flash_attention_for_cpu"),  # unpinned: PyTorch's choice on CPU
        ({"precision": "fp16", "attention": "sdpa_math", "optimizer": "foreach"}, "aten::_scaled_dot_product_attention_math"),
    ],
)
def test_the_bare_loop_runs_the_kernel_it_pins_and_trains(knobs, kernel):
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.bare_loop import train_bare
    from hpo.workloads.catalog import create_workload

    config = _tiny_config(**knobs)
    workload = create_workload("causal_lm", config.workload_options)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss = train_bare(workload, config, torch.device("cpu"))
    names = {event.name for event in prof.events()}
    assert kernel in names, sorted(n for n in names if "attention" in n)
    assert torch.isfinite(loss)
    if knobs.get("precision") == "fp16":  # autocast reached the matmuls, and GradScaler unscaled before clipping
        assert any("_amp_foreach_non_finite_check_and_unscale_" in n for n in names)


def test_rounds_alternate_which_side_runs_first():
    orders = [round_order(r) for r in range(4)]
    assert orders == [("hpo", "bare"), ("bare", "hpo"), ("hpo", "bare"), ("bare", "hpo")]
