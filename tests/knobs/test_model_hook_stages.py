"""The rules of the model hooks' stages (`hpo.knobs.model_hooks`), each shown failing loudly when
broken: a knob's hook must be a ModelHook, two knobs may not set the same `build_model` argument, and
exactly one knob builds the optimizer. And the around-step stage reaches Lightning's loop too,
through `Knob.applied`."""

from __future__ import annotations

import pytest
import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.engine import AssembledModel
from hpo.knobs.model_hooks import ModelHook, build_kwargs, loaded_hook
from hpo.knobs.systems import TRIAL_KNOBS, applied_to_process, model_hooks
from hpo.workloads.catalog import create_workload


def _assembled(knobs: Knobs | None = None) -> AssembledModel:
    config = toy_config(knobs)
    workload = create_workload(config.workload, config.workload_options)
    return AssembledModel(workload, config.knobs, config.training, torch.device("cpu"))


def test_the_stages_run_the_knobs_in_position_order():
    names = [name for name, _, _ in model_hooks(Knobs().as_dict())]
    assert names == sorted(TRIAL_KNOBS, key=lambda name: TRIAL_KNOBS[name].position)
    assert names.index("grad_checkpointing") < names.index("compile")  # compile wraps the checkpointed model


def test_a_hook_that_is_not_a_model_hook_is_refused():
    with pytest.raises(TypeError, match="must name a ModelHook instance; hpo.knobs.systems.precision:KNOB is a Precision"):
        loaded_hook("hpo.knobs.systems.precision:KNOB")


class _AttentionToo(ModelHook):
    def build_kwargs(self, value):
        return {"attention": "eager"}


def test_two_knobs_setting_one_build_argument_are_refused():
    hooks = [*model_hooks(Knobs().as_dict()), ("second", _AttentionToo(), True)]
    with pytest.raises(ValueError, match="two knobs set build_model's 'attention' \\(second and one before it\\)"):
        build_kwargs(hooks)


def test_a_trial_with_no_knob_building_its_optimizer_is_refused(monkeypatch):
    monkeypatch.setattr(type(TRIAL_KNOBS["optimizer"]), "hook", None)
    with pytest.raises(RuntimeError, match=r"exactly one knob's hook builds a trial's optimizer .*; 0 did \(\[\]\)"):
        _assembled()


class _SgdBuilder(ModelHook):
    def build_optimizer(self, assembly, value, parameters):
        return torch.optim.SGD(parameters, lr=0.1)


SGD_BUILDER = _SgdBuilder()


def test_a_trial_with_two_knobs_building_its_optimizer_is_refused(monkeypatch):
    monkeypatch.setattr(type(TRIAL_KNOBS["compile"]), "hook", f"{__name__}:SGD_BUILDER")
    with pytest.raises(RuntimeError, match=r"; 2 did \(\['compile', 'optimizer'\]\)"):
        _assembled()


def test_every_knobs_around_step_setting_is_in_force_through_applied():
    """What Lightning's loop enters for a whole fit: attention's pinned SDPA kernel comes with it."""
    assert torch.backends.cuda.flash_sdp_enabled()
    with applied_to_process(Knobs(attention="sdpa_math").as_dict(), "cpu"):
        assert torch.backends.cuda.math_sdp_enabled() and not torch.backends.cuda.flash_sdp_enabled()
    assert torch.backends.cuda.flash_sdp_enabled()
