"""The measurements the probe shares (the reference's step time, the model's FLOPs) are kept under
prefixes of their own, not as verdicts; a study written the old way, with both under `verdict:`,
is still read."""

from __future__ import annotations

import dataclasses

import optuna
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.hardware import resolve_device
from hpo.trial import execute
from hpo.verify.stored import VERDICT_PREFIX, StudyVerdicts, flops_key, reference_key

DEVICE = resolve_device("cpu")


def _old_names(attrs: dict) -> dict:
    """The study user attrs as an earlier build of hpo wrote them."""
    renamed = {}
    for name, value in attrs.items():
        for prefix, old in (("reference:", "verdict:reference-"), ("flops:", "verdict:flops-reference-")):
            if name.startswith(prefix):
                name = old + name.removeprefix(prefix)
        renamed[name] = value
    return renamed


def test_a_trial_keeps_its_measurements_apart_from_the_verdicts():
    study, config = optuna.create_study(), toy_config()
    assert execute(config, StudyVerdicts(study)).ok
    attrs = study.user_attrs
    assert attrs[reference_key(config, DEVICE)]["step_ms"] > 0
    assert attrs[flops_key(config, DEVICE)]["model_flops_per_sample"] > 0
    under_verdict = [record for name, record in attrs.items() if name.startswith(VERDICT_PREFIX)]
    assert under_verdict and all("verdict" in record for record in under_verdict)
    assert StudyVerdicts(study).all() == {
        name.removeprefix(VERDICT_PREFIX): r for name, r in attrs.items() if name.startswith(VERDICT_PREFIX)
    }


def test_a_study_written_the_old_way_is_read_and_not_timed_again():
    written, config = optuna.create_study(), toy_config()
    assert execute(config, StudyVerdicts(written)).ok
    old = optuna.create_study()
    for name, value in _old_names(written.user_attrs).items():
        old.set_user_attr(name, value)
    store = StudyVerdicts(old)
    assert store.get(reference_key(config, DEVICE)) == written.user_attrs[reference_key(config, DEVICE)]
    assert store.get(flops_key(config, DEVICE)) == written.user_attrs[flops_key(config, DEVICE)]
    assert not store.add(reference_key(config, DEVICE), {"step_ms": 1.0})  # held under its old name
    assert store.all() == StudyVerdicts(written).all()  # the old measurements are not listed as verdicts
    # Another knob combination on the old study: the reference's step time is read, not measured
    # again (nothing new under `reference:`), and the trial's slowdown is judged against it.
    other = dataclasses.replace(config, knobs=Knobs(precision="bf16", attention="eager", optimizer="forloop"), skip_slow=True)
    outcome = execute(other, store)
    assert outcome.attrs["slowdown"] is not None
    assert not [name for name in old.user_attrs if name.startswith(("reference:", "flops:"))]
