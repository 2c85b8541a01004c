"""The trial record schema: the docs' record reference comes from it (tests/test_docs.py), and it
rejects what it does not declare."""

from __future__ import annotations

import pydantic
import pytest

from hpo.trial.records import check_trial_attrs


def test_an_undeclared_or_mistyped_attr_is_rejected():
    check_trial_attrs({"verdict": "ok", "probe_s": 0.5})
    with pytest.raises(pydantic.ValidationError, match="samples_per_second"):
        check_trial_attrs({"verdict": "ok", "samples_per_second": 10.0})
    with pytest.raises(pydantic.ValidationError, match="probe_s"):
        check_trial_attrs({"verdict": "ok", "probe_s": "fast"})
    with pytest.raises(pydantic.ValidationError, match="verdict"):
        check_trial_attrs({"probe_s": 0.5})
