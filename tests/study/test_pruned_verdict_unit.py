"""A pruned trial's verdict names the unit of its step: under a time budget the pruner's steps are
milliseconds of training (`pruned: step 1000` read as the thousandth step)."""

from __future__ import annotations

import optuna
import pytest
from conftest import toy_config

from hpo.config.trial import TrainingConfig
from hpo.errors import PrunedByPruner
from hpo.study._objective import _reporter
from hpo.trial import execute
from hpo.verify.stored import MemoryVerdicts


def _pruned_at(step: int, **training) -> PrunedByPruner:
    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=0.0))  # prunes any loss above 0
    on_eval = _reporter(study.ask(), ("val_loss",), TrainingConfig(lr=1e-3, batch_size=8, max_steps=8, **training))
    with pytest.raises(PrunedByPruner) as caught:
        on_eval(step, {"val_loss": 1.0})
    return caught.value


@pytest.mark.parametrize(
    "step,training,verdict",
    [(4, {}, "pruned: step 4"), (1000, {"budget_s": 6.0, "eval_every_s": 1.0}, "pruned: at 1000 ms of training")],
)
def test_the_verdict_names_the_unit_of_the_pruned_step(step, training, verdict):
    pruned = _pruned_at(step, **training)
    assert str(pruned) == verdict

    def prune(report_step, metrics):
        raise pruned

    outcome = execute(toy_config(), MemoryVerdicts(), on_eval=prune)  # the trial's record, as a study keeps it
    assert outcome.pruned and str(outcome.verdict) == verdict
