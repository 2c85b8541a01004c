"""`hpo report`: a self-contained page with the knob-effect table, rejected trials apart, and
plots that render in a real browser with the network off."""

from __future__ import annotations

import re

import optuna
import pytest
from optuna.trial import TrialState, create_trial
from web import rendered_dom

from hpo.app.report import write_report
from hpo.reporting._knob_effects import knob_effects, markdown_table

KNOBS = {"precision": "fp32", "attention": "eager", "optimizer": "forloop", "grad_checkpointing": False, "compile": False}


def _trial(value, lr, speed, verdict="ok", **knobs):
    attrs = {"verdict": verdict, "knobs_requested": {**KNOBS, **knobs}, "config": {"format": 2, "params": {"lr": lr}}}
    if verdict == "ok":
        attrs["train_samples_per_s"] = speed
    dist = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)}
    dist["optimizer"] = optuna.distributions.CategoricalDistribution(["forloop", "fused"])
    params = {"lr": lr, "optimizer": {**KNOBS, **knobs}["optimizer"]}
    return create_trial(state=TrialState.COMPLETE, value=value, params=params, distributions=dist, user_attrs=attrs)


@pytest.fixture
def study() -> optuna.Study:
    study = optuna.create_study(study_name="rep", direction="minimize")
    study.set_metric_names(["val_loss"])
    study.add_trials([
        _trial(0.0, 1e-3, None, verdict="slow: 18.3x the fp32/eager step time", precision="bf16"),  # a placeholder value
        _trial(2.0, 1e-3, 100.0),
        _trial(2.2, 3e-3, 110.0),
        _trial(2.1, 1e-3, 150.0, optimizer="fused"),
        _trial(2.0, 2e-3, 160.0, optimizer="fused"),
        _trial(0.0, 1e-2, None, verdict="incompatible: attention=flash_attn needs the flash-attn package", optimizer="fused"),
    ])  # fmt: skip
    return study


def test_knob_effects_compare_each_value_with_its_baseline_among_comparable_trials(study):
    effects = {(e.knob, e.value): e for e in knob_effects(study.trials)}
    fused = effects[("optimizer", "fused")]
    # fused trials vs the median of the for-loop fp32 trials (105 samples/s, val_loss 2.1)
    assert fused.compared == 2 and fused.speed_ratio == pytest.approx((150 / 105 + 160 / 105) / 2)
    assert fused.metric_diff == pytest.approx(((2.1 - 2.1) + (2.0 - 2.1)) / 2)
    assert fused.verdicts == {"ok": 2, "incompatible": 1}
    bf16 = effects[("precision", "bf16")]
    assert bf16.compared == 0 and bf16.speed_ratio is None and bf16.verdicts == {"slow": 1}
    assert "| optimizer | fused | forloop | 1.48x | -0.05 | 2 | - | - | ok 2, incompatible 1 |" in markdown_table(
        list(effects.values()), "val_loss"
    )


def _memory_trial(peak, batch, chosen=None, **knobs):
    """A trained trial with what memory_budget and training record: its peak, its config's batch
    and, under `batch_size: auto`, the batch it chose."""
    trial = _trial(2.0, 1e-3, 100.0, **knobs)
    trial.user_attrs["peak_mem_mb"] = peak
    trial.user_attrs["config"]["params"]["batch_size"] = batch
    if chosen is not None:
        trial.user_attrs["batch_size_chosen"] = chosen
    return trial


def test_knob_effects_say_what_memory_each_value_saved_at_the_same_batch_and_the_batch_it_enabled():
    trials = [
        # at batch 32: checkpointing peaks 700 and 500 MB against the plain model's median 1000 (900, 1100)
        _memory_trial(900.0, 32), _memory_trial(1100.0, 32),
        _memory_trial(700.0, 32, grad_checkpointing=True), _memory_trial(500.0, 32, grad_checkpointing=True),
        # at batch 64 only checkpointing ran: nothing to compare its peak with
        _memory_trial(300.0, 64, grad_checkpointing=True),
        # batch_size: auto, each at its own batch: the batch each value enabled
        _memory_trial(2000.0, 48, chosen=48, attention="sdpa"), _memory_trial(2000.0, 80, chosen=80, attention="sdpa"),
        _memory_trial(2000.0, 96, chosen=96, attention="sdpa", grad_checkpointing=True),
        _memory_trial(2000.0, 128, chosen=128, attention="sdpa", grad_checkpointing=True),
        _memory_trial(2000.0, 160, chosen=160, attention="sdpa", grad_checkpointing=True),
    ]  # fmt: skip
    effects = {(e.knob, e.value): e for e in knob_effects(trials)}
    checkpointed = effects[("grad_checkpointing", True)]
    # (1000 - 700, 1000 - 500); the batch-64 trial and the auto ones (no baseline at their batch) are not compared
    assert checkpointed.memory_saved_mb == pytest.approx(400.0)
    assert checkpointed.auto_batch == 128  # median of 96, 128, 160
    plain = effects[("grad_checkpointing", False)]
    assert plain.memory_saved_mb is None and plain.auto_batch == 64  # the baseline: median of 48, 80
    assert effects[("attention", "eager")].auto_batch is None  # no eager trial chose its batch
    table = markdown_table(list(effects.values()), "val_loss")
    assert "| grad_checkpointing | True | False | 1.00x | +0 | 6 | +400 | 128 | ok 6 |" in table
    assert "| grad_checkpointing | False | False | baseline | - | 0 | baseline | 64 | ok 4 |" in table


def test_report_is_self_contained_and_keeps_rejected_trials_apart(study, tmp_path):
    out = tmp_path / "report.html"
    write_report(study, out)
    page = out.read_text()
    assert not re.search(r"<script[^>]+src=", page), "the page must not fetch scripts"
    assert page.count("Plotly.newPlot") >= 3 and len(re.findall(r"plotly\.js v\d", page)) == 1  # plotly inlined once
    assert "rejected (no value)" in page and "slow: 18.3x the fp32/eager step time" in page
    assert "Parameter importances for val_loss" in page and "Parameter importances for train_samples_per_s" in page
    assert "<td>optimizer</td><td>fused</td><td>forloop</td><td>1.48x</td>" in page
    assert "hpo export --study rep --trial 1 -o best.yaml &amp;&amp; hpo train best.yaml" in page


@pytest.mark.browser
def test_report_renders_in_headless_chromium_with_the_network_off(study, tmp_path):
    out = tmp_path / "report.html"
    write_report(study, out)
    dom = rendered_dom(out.as_uri(), tmp_path / "profile", offline=True)
    # plotly draws each figure into an SVG "main-svg"; an unrendered div holds none.
    assert dom.count('class="main-svg"') >= 3
    assert "rejected (no value)" in dom  # the legend entry, drawn by plotly
