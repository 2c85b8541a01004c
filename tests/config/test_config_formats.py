"""One schema for search-space files and exported configs: an export (format 2) is a search-space
file with every value fixed; an export of hpo 0.1 (format 1, committed under data/) still reads,
with errors in its own key paths; `hpo train` and `hpo validate` accept both."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import toy_config
from key_paths import edited

from hpo.config.resolve import fixed_config, load_config
from hpo.config.space import parse_space
from hpo.config.trial import Knobs, TrainingConfig, TrialConfig
from hpo.errors import UserInputError
from hpo.knobs.systems import TRIAL_KNOBS

ROOT = Path(__file__).resolve().parents[2]
FORMAT_1 = Path(__file__).parent / "data" / "format1-causal_lm.yaml"
FORMAT_1_CONFIG = TrialConfig(
    workload="causal_lm",
    workload_options={
        "d_model": 32,
        "n_layers": 1,
        "n_heads": 2,
        "seq_len": 32,
        "corpus_bytes": 60000,
        "eval_batches": 2,
        "dropout": 0.05,
    },
    training=TrainingConfig(
        lr=0.003,
        batch_size=8,
        weight_decay=0.01,
        warmup_steps=2,
        grad_clip=1.0,
        max_steps=6,
        eval_every=3,
        compile_backend="eager",
    ),
    knobs=Knobs(precision="fp32", attention="eager", optimizer="forloop", grad_checkpointing=True, compile=False),
    seed=7,
    objectives=("val_loss", "val_perplexity"),
    directions=("minimize", "minimize"),
    device="auto",
    skip_slow=False,
    slow_ratio=4.0,
)


def _format1(**changes) -> dict:
    return edited(yaml.safe_load(FORMAT_1.read_text()), changes, sep="__")


def test_a_format_1_export_reads_as_the_config_it_recorded():
    assert load_config(FORMAT_1) == FORMAT_1_CONFIG


@pytest.mark.parametrize("config", [FORMAT_1_CONFIG, toy_config(d_model=16)], ids=["causal_lm", "toy"])
def test_an_export_is_a_search_space_that_resolves_to_its_own_config(config):
    exported = config.to_dict()
    assert exported["format"] == 2 and set(exported) == {"format", "hpo_version", "study", "workload", "params", "systems"}
    space = parse_space(json.loads(json.dumps(exported)), source="export.yaml")
    assert fixed_config(space) == config


def test_an_export_lists_just_the_trial_knobs_under_systems_when_the_rest_is_default():
    config = dataclasses.replace(toy_config(compile_backend="inductor"), device="auto")
    assert set(config.to_dict()["systems"]) == set(TRIAL_KNOBS)


def test_an_edited_export_searches_what_the_user_turned_into_a_range():
    exported = FORMAT_1_CONFIG.to_dict()
    exported["params"]["lr"] = {"low": 1e-4, "high": 1e-2, "log": True}
    exported["systems"]["precision"] = ["fp32", "bf16"]
    space = parse_space(exported, source="edited.yaml")
    assert space.systems["precision"] == ["fp32", "bf16"] and space.params["lr"].log
    with pytest.raises(UserInputError, match=r"^edited\.yaml: params\.lr: a config to train or enqueue holds one value"):
        fixed_config(space)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"training__lr": -1.0}, "training.lr: Input should be greater than 0, got -1.0"),
        ({"training__batch_size": 8.5}, "training.batch_size: Input should be a valid integer, got 8.5"),
        ({"training__max_steps": 0}, "training.max_steps: Input should be greater than or equal to 1"),
        ({"training__compile_backend": "cudagraphs"}, "training.compile_backend: Input should be"),
        ({"seed": "seven"}, "seed: Input should be a valid integer"),
        ({"objectives": ["val_accuracy"], "directions": ["maximize"]}, "objectives: workload 'causal_lm' reports"),
        ({"verification__slow_ratio": 0.5}, "verification.slow_ratio: Input should be greater than 1"),
        ({"verification__strict": True}, "verification.strict: unknown key"),
        ({"device": "gpu"}, "device: String should match pattern"),
        ({"systems__precision": "fp8"}, "systems.precision: Input should be 'fp32', 'bf16' or 'fp16'"),
        ({"systems__precision": ["fp32", "bf16"]}, "systems.precision: a format-1 config holds one fixed value per key"),
        ({"workload__widht": 3}, "workload.widht: unknown option for this workload"),
        ({"colour": "red"}, "colour: unknown key in a format-1 config"),
    ],
)
def test_errors_in_a_format_1_config_name_its_own_key_paths(changes, message):
    with pytest.raises(UserInputError) as info:
        parse_space(_format1(**changes), source="old.yaml")
    assert str(info.value).startswith(f"old.yaml: {message}"), str(info.value)


@pytest.mark.parametrize(
    "params,message",
    [
        ({"lr": "1e-3"}, "params.lr: Input should be a valid number (YAML reads 1e-3 as text"),
        ({"lr": {"low": -1.0, "high": 1.0}}, "params.lr.low: Input should be greater than 0, got -1.0"),
        ({"batch_size": {"choices": [16, 0]}}, "params.batch_size.choices[1]: Input should be greater than 0, got 0"),
        ({"weight_decay": -0.1}, "params.weight_decay: Input should be greater than or equal to 0, got -0.1"),
        ({"warmup_steps": True}, "params.warmup_steps: Input should be a valid integer, got True"),
    ],
)
def test_the_trainers_params_are_checked_in_every_candidate_value(params, message):
    with pytest.raises(UserInputError) as info:
        parse_space({"workload": {"name": "causal_lm"}, "params": params}, source="space.yaml")
    assert str(info.value).startswith(f"space.yaml: {message}"), str(info.value)


@pytest.mark.parametrize("fmt", [3, 99, "2", True])
def test_a_config_from_another_format_is_refused_by_name(fmt):
    with pytest.raises(UserInputError, match=rf"^new\.yaml: format: config format {fmt!r} is not supported"):
        parse_space({"format": fmt, "workload": {"name": "causal_lm"}}, source="new.yaml")


def _hpo(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), OMP_NUM_THREADS="1", KINETO_LOG_LEVEL="5"
    )
    return subprocess.run(
        [sys.executable, "-m", "hpo.app.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_hpo_validate_and_train_read_a_format_1_export_as_its_format_2_twin(tmp_path):
    """Training the committed format-1 file and the format-2 config it records gives the same metric."""
    validate = _hpo("validate", str(FORMAT_1), cwd=tmp_path)
    assert validate.returncode == 0 and "ok (" in validate.stdout, validate.stderr
    old = _hpo("train", str(FORMAT_1), "--json", cwd=tmp_path)
    assert old.returncode == 0, old.stderr
    recorded = json.loads(old.stdout)
    assert recorded["verdict"] == "ok" and recorded["user_attrs"]["config"] == FORMAT_1_CONFIG.to_dict()
    twin = tmp_path / "format2.yaml"
    twin.write_text(yaml.safe_dump(recorded["user_attrs"]["config"], sort_keys=False))
    new = _hpo("train", str(twin), "--json", cwd=tmp_path)
    assert new.returncode == 0, new.stderr
    assert json.loads(new.stdout)["values"] == recorded["values"]


def test_a_trial_that_recorded_format_1_exports_as_format_2():
    from hpo.app.best_and_export import exported_config

    recorded = yaml.safe_load(FORMAT_1.read_text())
    trial = optuna.trial.create_trial(value=1.0, user_attrs={"config": recorded, "verdict": "ok"})
    exported = exported_config(trial)
    assert exported["format"] == 2 and "training" not in exported
    assert fixed_config(parse_space(exported, source="export.yaml")) == FORMAT_1_CONFIG
