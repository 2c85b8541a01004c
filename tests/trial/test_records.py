"""The trial record schema: the README's list comes from it, and it rejects what it does not declare."""

from __future__ import annotations

import re
from pathlib import Path

import pydantic
import pytest

from hpo.trial.records import check_trial_attrs, readme_list

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_list_is_generated_from_the_schema():
    text = README.read_text()
    block = re.search(r"<!-- records:begin -->\n(.*?)<!-- records:end -->", text, re.S)
    assert block, "README.md lost its records markers"
    assert block.group(1) == readme_list() + "\n", "README is stale: paste `python -m hpo.trial.records` between the markers"


def test_an_undeclared_or_mistyped_attr_is_rejected():
    check_trial_attrs({"verdict": "ok", "probe_s": 0.5})
    with pytest.raises(pydantic.ValidationError, match="samples_per_second"):
        check_trial_attrs({"verdict": "ok", "samples_per_second": 10.0})
    with pytest.raises(pydantic.ValidationError, match="probe_s"):
        check_trial_attrs({"verdict": "ok", "probe_s": "fast"})
    with pytest.raises(pydantic.ValidationError, match="verdict"):
        check_trial_attrs({"probe_s": 0.5})
