"""`params.lr_scaling`: how lr follows the batch `batch_size: auto` chose, from a base batch the user names."""

from __future__ import annotations

import pytest

from hpo.config.lr_scaling import scaled_lr
from hpo.config.params import AutoBatch
from hpo.config.resolve import fixed_config
from hpo.config.space import parse_space
from hpo.errors import UserInputError

SPACE = {"workload": {"name": "toy_workloads:Toy"}, "study": {"memory_limit_gb": 3.0}}
AUTO = {"auto": {"max": 256, "multiple_of": 8, "base_batch": 32}}


def _space(**params):
    return parse_space({**SPACE, "params": params}, source="t")


def test_linear_and_sqrt_scale_from_the_base_batch_and_none_does_not():
    assert scaled_lr(1e-3, 128, AutoBatch(base_batch=32, lr_scaling="linear")) == pytest.approx(4e-3)
    assert scaled_lr(1e-3, 128, AutoBatch(base_batch=32, lr_scaling="sqrt")) == pytest.approx(2e-3)
    assert scaled_lr(1e-3, 128, AutoBatch()) == 1e-3


def test_the_scaling_rides_on_the_auto_batch_and_is_written_back():
    config = fixed_config(_space(lr=1e-3, batch_size=AUTO, lr_scaling="sqrt"))
    assert config.batch_auto == AutoBatch(max=256, multiple_of=8, base_batch=32, lr_scaling="sqrt")
    assert "lr_scaling" not in config.workload_options
    params = config.to_dict()["params"]
    assert params["lr_scaling"] == "sqrt" and params["batch_size"] == AUTO
    assert fixed_config(parse_space(config.to_dict(), source="again")).batch_auto == config.batch_auto
    assert fixed_config(_space(batch_size="auto", lr_scaling="none")).batch_auto.lr_scaling == "none"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"batch_size": AUTO, "lr_scaling": "cubic"}, r"params.lr_scaling: one of none, linear, sqrt .*got 'cubic'"),
        ({"batch_size": AUTO, "lr_scaling": ["linear", "sqrt"]}, r"params.lr_scaling: .*got 'a searched value'"),
        ({"batch_size": 64, "lr_scaling": "linear"}, r"linear scales lr to the batch that batch_size: auto .*got batch_size 64"),
        ({"batch_size": "auto", "lr_scaling": "linear"}, r"linear needs the batch params.lr is the rate for.*base_batch: N"),
        ({"batch_size": AUTO}, r"params.batch_size.auto.base_batch: used only by lr_scaling .*got base_batch 32"),
        ({"batch_size": {"auto": {"base_batch": 0}}}, r"params.batch_size.auto.base_batch must be an integer >= 1, got 0"),
    ],
)
def test_bad_scalings_are_refused_in_one_line(params, message):
    with pytest.raises(UserInputError, match=message) as caught:
        _space(**params)
    assert "\n" not in str(caught.value)
