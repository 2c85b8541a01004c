"""`hpo report`: a self-contained page with the knob-effect table, rejected trials apart, and
plots that render in a real browser with the network off."""

from __future__ import annotations

import re

import optuna
import pytest
from optuna.trial import TrialState, create_trial
from web import rendered_dom

from hpo.app.report import write_report
from hpo.reporting.knob_effects import knob_effects, markdown_table

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
    assert "| optimizer | fused | forloop | 1.48x | -0.05 | 2 | ok 2, incompatible 1 |" in markdown_table(
        list(effects.values()), "val_loss"
    )


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
