"""The trial record schema: the docs' record reference comes from it (tests/test_docs.py), and it
rejects what it does not declare."""

from __future__ import annotations

import pydantic
import pytest

from hpo.records import RecordKey, RuntimeSettings, TrialRecord, check_trial_attrs


def test_an_undeclared_or_mistyped_attr_is_rejected():
    check_trial_attrs({"verdict": "ok", "probe_s": 0.5})
    with pytest.raises(pydantic.ValidationError, match="samples_per_second"):
        check_trial_attrs({"verdict": "ok", "samples_per_second": 10.0})
    with pytest.raises(pydantic.ValidationError, match="probe_s"):
        check_trial_attrs({"verdict": "ok", "probe_s": "fast"})
    with pytest.raises(pydantic.ValidationError, match="verdict"):
        check_trial_attrs({"probe_s": 0.5})


def test_each_record_key_constant_names_a_field_of_the_schema():
    constants = {name: value for name, value in vars(RecordKey).items() if name.isupper()}
    assert sorted(constants.values()) == sorted(TrialRecord.model_fields)
    assert all(name == value.upper() for name, value in constants.items())


def test_the_runtime_settings_are_declared():
    check_trial_attrs({"verdict": "ok", "runtime": {"tf32": False, "cpu_allocator": "glibc"}})
    assert set(RuntimeSettings.model_fields) == {"tf32", "cpu_allocator"}


def test_hpo_names_every_record_key_it_reads_or_writes_by_its_constant():
    """A literal key in `user_attrs.get("…")` drifts from the schema unseen; the constant cannot."""
    import re
    from pathlib import Path

    literal = re.compile(r"""\b(?:user_attrs|attrs)(?:\.get\(|\[)\s*["']""")
    package = Path(__file__).resolve().parents[1] / "hpo"
    found = [
        f"{path.relative_to(package.parent)}:{number}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert not found, "name the key by its hpo.records.RecordKey constant:\n" + "\n".join(found)
