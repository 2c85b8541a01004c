"""Every allowed knob value has a builder, and every builder is an allowed value."""

import pydantic
import pytest

from hpo.knobs.attention import ATTENTION_FUNCTIONS, SDPA_KERNELS
from hpo.knobs.optimizers import OPTIMIZER_BUILDERS
from hpo.knobs.precision import DTYPES
from hpo.knobs.values import ATTENTIONS, COMPILE_MODES, OPTIMIZER_IMPLS, PRECISIONS
from hpo.space.schema import SystemsSpec


def test_registry_keys_are_the_schema_values():
    assert set(ATTENTION_FUNCTIONS) == set(ATTENTIONS)
    assert set(SDPA_KERNELS) == {a for a in ATTENTIONS if a.startswith("sdpa_")}
    assert set(OPTIMIZER_BUILDERS) == set(OPTIMIZER_IMPLS)
    assert set(DTYPES) == set(PRECISIONS)


@pytest.mark.parametrize(
    "knob,values",
    [("attention", ATTENTIONS), ("optimizer", OPTIMIZER_IMPLS), ("precision", PRECISIONS), ("compile", (False, *COMPILE_MODES))],
)
def test_schema_accepts_every_registry_value_and_nothing_else(knob, values):
    for value in values:
        assert SystemsSpec(**{knob: value}).choices()[knob] == [value]
    assert SystemsSpec(**{knob: list(values)}).choices()[knob] == list(values)
    with pytest.raises(pydantic.ValidationError):
        SystemsSpec(**{knob: "not-a-backend"})
