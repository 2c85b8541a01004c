"""What the file says is what runs: every workload option is checked against its `Options` field's
type, in one line naming the key path, the type and the value, for every option of every built-in
workload (listed from the registry, so a new option is covered without a new test) and for a user's
own; and a list under `params` is searched, so each trial receives one of its values, never the list."""

from __future__ import annotations

import collections.abc
import dataclasses
import importlib
import types
import typing
from typing import Literal

import optuna
import pytest
import yaml

from hpo.app.cli import main
from hpo.config.params import Choices, parse_param
from hpo.config.space import parse_space
from hpo.errors import UserInputError
from hpo.study import suggest_config
from hpo.workloads.base import WorkloadOptions, build_options
from hpo.workloads.catalog import BUILTIN_OPTIONS, parse_options

# Values of distinct YAML kinds: the first one a field's type does not admit is its wrong value.
_WRONG_CANDIDATES = ("wide", 2.5, [1, 2])


def _admitted(annotation) -> set[type]:
    """The Python types YAML values of `annotation` may have, read here independently of hpo's check."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_admitted(a) for a in args))
    if origin is Literal:
        return {type(a) for a in args}
    if annotation is type(None):
        return {type(None)}
    if origin is not None and issubclass(origin, collections.abc.Sequence):
        return {list}
    if origin is not None and issubclass(origin, collections.abc.Mapping):
        return {dict}
    if annotation is float:
        return {int, float}
    return {annotation} if isinstance(annotation, type) and annotation is not typing.Any else {object}


def _wrong_value(annotation):
    """None where every value is admitted (Any): an option no check can refuse a wrong value for."""
    admitted = _admitted(annotation)
    return next((v for v in _WRONG_CANDIDATES if not any(isinstance(v, t) for t in admitted)), None)


def _builtin_fields() -> list[tuple[str, str, object]]:
    rows = []
    for name, module in sorted(BUILTIN_OPTIONS.items()):
        options = importlib.import_module(module).Options
        hints = typing.get_type_hints(options)
        rows += [(name, f.name, _wrong_value(hints[f.name])) for f in dataclasses.fields(options)]
    return rows


BUILTIN_FIELDS = _builtin_fields()


def test_the_grid_covers_every_builtin_workload_and_each_has_several_options():
    assert {row[0] for row in BUILTIN_FIELDS} == set(BUILTIN_OPTIONS)
    assert len(BUILTIN_FIELDS) > 3 * len(BUILTIN_OPTIONS)


@pytest.mark.parametrize("workload, key, wrong", BUILTIN_FIELDS, ids=[f"{w}.{k}" for w, k, _ in BUILTIN_FIELDS])
def test_a_wrong_type_under_workload_is_one_line_naming_key_type_and_value(workload, key, wrong):
    assert wrong is not None, f"{workload}.{key} admits any value: annotate the type a user may write"
    with pytest.raises(UserInputError) as info:
        parse_options(workload, {key: wrong})
    text = str(info.value)
    assert text.startswith(f"workload.{key}: expected ") and f"got {wrong!r} ({type(wrong).__name__})" in text
    assert "\n" not in text


SCALAR_FIELDS = [row for row in BUILTIN_FIELDS if row[2] is not None and not isinstance(row[2], list)]


@pytest.mark.parametrize("workload, key, wrong", SCALAR_FIELDS, ids=[f"{w}.{k}" for w, k, _ in SCALAR_FIELDS])
def test_a_wrong_type_among_a_searched_list_names_its_params_path(workload, key, wrong):
    # Checked before any file an option names is read: the Hugging Face workloads need none here.
    with pytest.raises(UserInputError) as info:
        parse_space({"workload": {"name": workload}, "params": {key: [wrong]}}, source="s.yaml")
    assert str(info.value).startswith(f"s.yaml: params.{key}[0]: expected ") and repr(wrong) in str(info.value)


@pytest.mark.parametrize(
    "workload, raw, message",
    [
        ({"n_layers": True}, {}, "workload.n_layers: expected int, got True (bool): a bool is not a number; the default is 2"),
        ({"d_model": "wide"}, {}, "workload.d_model: expected int, got 'wide' (str); the default is 128"),
        ({}, {"dropout": [0.1, 0.3, "x"]}, "params.dropout[2]: expected float, got 'x' (str)"),
        ({}, {"dropout": [0.1, 1.5]}, "params.dropout[1]: dropout must be in [0, 1), got 1.5"),
        ({}, {"dropout": {"low": 0.0, "high": 1.5}}, "params.dropout.high: dropout must be in [0, 1), got 1.5"),
        ({}, {"n_layers": {"low": 1.5, "high": 3.0}}, "params.n_layers.low: expected int, got 1.5 (float)"),
        ({}, {"batch_size": [8, 0]}, "params.batch_size[1]: Input should be greater than 0, got 0"),
        ({}, {"d_model": [[64, 128]]}, "params.d_model[0]: a searched value is a bool, number, string or null"),
        ({"dropout": "1e-3"}, {}, "YAML reads 1e-3 as text; write a number with a dot"),
    ],
)
def test_what_the_issue_found_is_one_line_without_python_s_own_text(workload, raw, message):
    with pytest.raises(UserInputError) as info:
        parse_space({"workload": {"name": "causal_lm", **workload}, "params": raw}, source="s.yaml")
    assert message in str(info.value) and "\n" not in str(info.value)
    assert "not supported between" not in str(info.value) and "string formatting" not in str(info.value)


def test_an_int_is_a_float_and_a_bool_is_a_bool():
    space = parse_space({"workload": {"name": "causal_lm", "dropout": 0}, "params": {"val_fraction": [0.1, 0.2]}}, "s")
    assert space.workload_options() == {"dropout": 0}
    assert parse_space({"workload": {"name": "causal_lm"}, "params": {"dropout": [0, 0.1]}}, "s").params["dropout"] == Choices(
        (0, 0.1)
    )
    assert parse_options("text_classification", {"freeze_embeddings": True}).freeze_embeddings is True


def test_hpo_validate_exits_2_with_the_line(tmp_path, capsys):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({"workload": {"name": "causal_lm", "n_layers": True}}))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "workload.n_layers: expected int, got True (bool)" in err


@dataclasses.dataclass(frozen=True, kw_only=True)
class Block:
    width: int = 8
    kind: Literal["mlp", "conv"] = "mlp"


@dataclasses.dataclass(frozen=True, kw_only=True)
class UserOptions(WorkloadOptions):
    sizes: tuple[int, ...] = (1, 2)
    pair: tuple[int, str] = (1, "a")
    block: Block = dataclasses.field(default_factory=Block)
    scale: float | None = None
    tags: dict[str, float] = dataclasses.field(default_factory=dict)


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"sizes": [1, "two"]}, "workload.sizes[1]: expected int, got 'two' (str)"),
        ({"sizes": 3}, "workload.sizes: expected a list of int, got 3 (int)"),
        ({"pair": [1, 2]}, "workload.pair[1]: expected str, got 2 (int)"),
        ({"pair": [1]}, "workload.pair: expected a list of 2 (int, str), got [1] (list)"),
        ({"block": {"width": True}}, "workload.block.width: expected int, got True (bool): a bool is not a number"),
        ({"block": {"kind": "rnn"}}, "workload.block.kind: expected one of ['mlp', 'conv'], got 'rnn' (str)"),
        ({"block": {"depth": 2}}, "workload.block.depth: unknown option"),
        ({"block": 3}, "workload.block: expected a mapping of Block's options, got 3 (int)"),
        ({"scale": "big"}, "workload.scale: expected float or null, got 'big' (str)"),
        ({"tags": {"a": "x"}}, "workload.tags.a: expected float, got 'x' (str)"),
    ],
)
def test_a_user_s_options_get_the_same_check_from_their_annotations(raw, message):
    with pytest.raises(UserInputError) as info:
        build_options(UserOptions, raw, "workload")
    assert str(info.value).startswith(message)


def test_a_user_s_options_are_built_as_annotated():
    built = build_options(UserOptions, {"sizes": [3, 4], "block": {"width": 16}, "scale": 2}, "workload")
    # A list read from YAML is held as the annotated tuple (hashable), a mapping as the nested dataclass.
    assert type(built.sizes) is tuple and built.sizes == (3, 4) and built.block == Block(width=16) and built.scale == 2


def test_a_user_workload_is_checked_through_the_registry():
    with pytest.raises(UserInputError, match=r"^workload.d_model: expected int, got 'wide' \(str\); the default is 32$"):
        parse_options("toy_workloads:Toy", {"d_model": "wide"})


def test_a_list_in_params_is_a_choice_as_a_choices_mapping_is():
    assert parse_param("params.x", [8, 16]) == Choices((8, 16)) == parse_param("params.x", {"choices": [8, 16]})


def test_each_trial_receives_and_records_one_member_of_a_searched_list_never_the_list():
    space = parse_space(
        {
            "study": {"sampler": {"name": "random", "seed": 0}},
            "workload": {"name": "toy_workloads:Toy"},
            "params": {"index_add_residual": [False, True], "batch_size": [8, 16], "dropout": [0.0, 0.1]},
        },
        source="s.yaml",
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = []
    for _ in range(12):
        trial = study.ask()
        config = suggest_config(trial, space)
        residual, dropout = config.workload_options["index_add_residual"], config.workload_options["dropout"]
        assert type(residual) is bool and dropout in (0.0, 0.1) and config.training.batch_size in (8, 16)
        assert trial.params == {"index_add_residual": residual, "batch_size": config.training.batch_size, "dropout": dropout}
        parse_options("toy_workloads:Toy", config.workload_options)  # what the trial builds is valid options
        seen.append((residual, config.training.batch_size))
    assert {r for r, _ in seen} == {False, True} and {b for _, b in seen} == {8, 16}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PartlyTypedOptions(WorkloadOptions):
    handle: NotImportedHere | None = None  # noqa: F821 - a name only a type checker would import
    width: int = 3


def test_an_annotation_that_cannot_be_resolved_leaves_the_other_fields_checked():
    assert build_options(PartlyTypedOptions, {"handle": object(), "width": 4}, "workload").width == 4
    with pytest.raises(UserInputError, match=r"^workload.width: expected int, got 'x' \(str\)"):
        build_options(PartlyTypedOptions, {"width": "x"}, "workload")


def test_the_knobs_have_one_set_of_defaults():
    """The schema's defaults and a trial's `Knobs` and `LoaderSettings` read the registry's: a file
    that names no knob runs what a config built in code runs."""
    from hpo.config.schema import SystemsSpec
    from hpo.config.trial import Knobs, LoaderSettings
    from hpo.knobs.registry import KNOB_DEFAULTS, LOADER_KNOBS

    systems = SystemsSpec()
    assert Knobs() == Knobs(**KNOB_DEFAULTS) and {k: getattr(systems, k) for k in KNOB_DEFAULTS} == KNOB_DEFAULTS
    loader_defaults = {name: knob.default for name, knob in LOADER_KNOBS.items()}
    assert LoaderSettings().as_dict() == loader_defaults == {k: getattr(systems, k) for k in loader_defaults}
