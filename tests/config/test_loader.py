"""Search-space files: every shipped file validates; params parse into the right specs; errors name
the key path, the rule and the value."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hpo.config.params import Choices, Fixed, FloatRange, IntRange, parse_param
from hpo.config.space import load_space, parse_space
from hpo.errors import UserInputError

SHIPPED = sorted((Path(__file__).resolve().parents[2] / "search_spaces").glob("*.yaml"))
MINIMAL = {"workload": {"name": "causal_lm"}}


@pytest.fixture(scope="module")
def hf_examples(tmp_path_factory) -> Path:
    """The shipped Hugging Face spaces name local folders that `python -m hpo.workloads.hf_examples`
    writes (nothing ships a checkpoint in the repo): written once here, as a user would."""
    from hpo.workloads.hf_examples import write_examples

    root = tmp_path_factory.mktemp("hf")
    write_examples(root / "studies" / "hf-example")
    return root


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_search_space_validates(path, request, monkeypatch):
    if path.name.startswith("hf_"):
        monkeypatch.chdir(request.getfixturevalue("hf_examples"))  # their paths are relative to where hpo runs
    space = load_space(path)
    assert space.study.n_trials >= 1 and space.systems["precision"]


def test_every_builtin_workload_has_a_shipped_file_and_there_is_a_quickstart():
    from hpo.workloads.catalog import BUILTIN_WORKLOADS

    used = {yaml.safe_load(p.read_text())["workload"]["name"] for p in SHIPPED}
    assert set(BUILTIN_WORKLOADS) <= used and "quickstart" in {p.stem for p in SHIPPED}


@pytest.mark.parametrize(
    "raw,expected",
    [
        (0.01, Fixed(0.01)),
        ({"choices": [16, 32]}, Choices((16, 32))),
        ({"low": 1, "high": 4}, IntRange(1, 4)),
        ({"low": 32, "high": 128, "step": 32}, IntRange(32, 128, step=32)),
        ({"low": 1e-5, "high": 1e-3, "log": True}, FloatRange(1e-5, 1e-3, log=True)),
        ({"low": 0.0, "high": 0.5, "step": 0.1}, FloatRange(0.0, 0.5, step=0.1)),
    ],
)
def test_params_parse(raw, expected):
    assert parse_param("params.x", raw) == expected


@pytest.mark.parametrize(
    "raw,message",
    [
        ({"low": 5, "high": 1}, "params.x: low <= high must hold, got low=5, high=1"),
        ({"low": 1, "high": 5, "step": -1}, "params.x.step must be > 0, got -1"),
        ({"low": 0, "high": 1, "log": True}, "params.x: a log range needs low > 0, got low=0"),
        ({"low": "a", "high": 1}, "params.x.low must be a number, got 'a'"),
        ({"choices": []}, "params.x: choices must be the only key and a non-empty list"),
        ({"lo": 1, "high": 2}, "params.x: a param is a scalar"),
    ],
)
def test_bad_params_name_path_rule_and_value(raw, message):
    with pytest.raises(UserInputError) as info:
        parse_param("params.x", raw)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    "patch,message",
    [
        ({"study": {"nmae": "x"}}, "study.nmae: unknown key"),
        ({"systems": {"precision": ["fp8"]}}, "systems.precision"),
        ({"study": {"sampler": {"name": "bogus"}}}, "study.sampler.name"),
        ({"study": {"objectives": ["a", "b"], "directions": ["minimize"]}}, "needs one direction per objective"),
        ({"workload": {"name": "nope"}}, "workload.name: unknown workload 'nope'"),
        ({"workload": {"name": "causal_lm", "widht": 3}}, "workload.widht: unknown option for this workload"),
        ({"params": {"n_layer": 3}}, "params.n_layer: unknown option"),
        ({"study": {"objectives": ["val_accuracy"]}}, "study.objectives: workload 'causal_lm' reports"),
    ],
)
def test_bad_space_gives_one_line_with_the_key_path(patch, message):
    raw = {**MINIMAL, **patch}
    if "workload" not in patch:
        raw["workload"] = MINIMAL["workload"]
    with pytest.raises(UserInputError) as info:
        parse_space(raw, source="space.yaml")
    text = str(info.value)
    assert text.startswith("space.yaml: ") and message in text and "\n" not in text


def test_precision_alias_none_means_fp32():
    space = parse_space({**MINIMAL, "systems": {"precision": ["none", "bf16"]}}, source="s")
    assert space.systems["precision"] == ["fp32", "bf16"]
