"""`hpo export --as hf|lightning|python`: the real tools, built from the written arguments, run what
the trial was observed to run; the evidence comes from their own training step, not from a flag."""

from __future__ import annotations

import json
import sys

import optuna
import pytest
import torch
from hf_evidence import count_recomputation, examples, observe, pinned, run_hf_trainer
from hf_fixtures import tiny_bert, topic_files

from hpo.app import export_as as ex
from hpo.errors import UserInputError
from hpo.trial._lightning_loop import _closure_first
from hpo.workloads.catalog import create_workload

CASES = [
    {"precision": "fp32", "attention": "eager", "optimizer": "forloop", "grad_checkpointing": False, "compile": False},
    {"precision": "bf16", "attention": "sdpa_flash", "optimizer": "fused", "grad_checkpointing": True, "compile": False},
]


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export")
    model_dir = tiny_bert(folder / "model")
    train, val = topic_files(folder)
    raw = {
        "model_name_or_path": str(model_dir),
        "train_file": str(train),
        "validation_file": str(val),
        "cache_dir": str(folder / "cache"),
    }
    return create_workload("hf_text_classification", raw)


def trial_with(observed: dict, workload, number: int = 3) -> optuna.trial.FrozenTrial:
    """A finished trial as hpo records one (config, knobs_observed, steps_run, device)."""
    options = {k: v for k, v in vars(workload.options).items() if v is not None and k != "seed"}
    config = {
        "format": 2,
        "study": {"objectives": ["val_accuracy"], "directions": ["maximize"], "seed": 0},
        "workload": {"name": "hf_text_classification", "max_steps": 2, "eval_every": 2, **options},
        "params": {"lr": 1e-3, "batch_size": 4, "weight_decay": 0.01, "warmup_steps": 0, "grad_clip": 1.0},
        "systems": {**observed},
    }
    attrs = {
        "config": config,
        "knobs_observed": {**observed, "compiled_graphs": 0},
        "steps_run": 2,
        "device": "cpu: test",
        "verdict": "ok",
    }
    trial = optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, value=0.5, user_attrs=attrs)
    trial.number = number
    return trial


@pytest.mark.slow
@pytest.mark.parametrize("knobs", CASES, ids=lambda k: k["precision"])
def test_the_hf_trainer_built_from_the_export_runs_the_observed_knobs(knobs, workload, tmp_path):
    trial = trial_with(knobs, workload)
    ex.export_as(trial, "hf", tmp_path / "out")
    training_args = json.loads((tmp_path / "out" / "training_args.json").read_text())
    assert training_args["optim"] == {"forloop": "adamw_torch", "fused": "adamw_torch_fused"}[knobs["optimizer"]]
    seen, recompute, args = run_hf_trainer(tmp_path / "out", workload, tmp_path / "trainer", ex.winner_of(trial))
    assert args.bf16 == (knobs["precision"] == "bf16") and args.gradient_checkpointing == knobs["grad_checkpointing"]
    for knob in ("precision", "attention", "optimizer"):
        assert seen[knob] == knobs[knob], (knob, seen)
    # The Trainer turned the model's own checkpointing on (or left it off): layers recomputed in backward.
    assert (recompute.backward_runs > 0) == knobs["grad_checkpointing"], vars(recompute)


@pytest.mark.slow
@pytest.mark.parametrize("knobs", CASES, ids=lambda k: k["precision"])
def test_the_python_snippet_runs_the_observed_knobs(knobs, workload):
    trial = trial_with(knobs, workload)
    snippet = ex.export_as(trial, "python", None)
    namespace: dict = {}
    exec(compile(snippet, "<snippet>", "exec"), namespace)
    model = workload.build_model(ex.HF_ATTN[knobs["attention"]])
    recompute = count_recomputation(model)
    batches = workload.train_batches(4, seed=0)
    captured = {}
    real_adamw = torch.optim.AdamW

    def adamw(*args, **kwargs):
        captured["optimizer"] = real_adamw(*args, **kwargs)
        return captured["optimizer"]

    namespace["torch"].optim.AdamW = adamw
    try:
        seen = observe(lambda: (namespace["train"](model, batches, workload.training_loss), captured["optimizer"])[1])
    finally:
        torch.optim.AdamW = real_adamw
    for knob in ("precision", "attention", "optimizer"):
        assert seen[knob] == knobs[knob], (knob, seen)
    assert (recompute.backward_runs > 0) == knobs["grad_checkpointing"], vars(recompute)


@pytest.mark.slow
@pytest.mark.parametrize("knobs", CASES, ids=lambda k: k["precision"])
def test_lightning_trainer_built_from_the_export_runs_the_observed_knobs(knobs, workload, tmp_path):
    lightning = pytest.importorskip("lightning")

    trial = trial_with(knobs, workload)
    ex.export_as(trial, "lightning", tmp_path / "out")
    trainer_kwargs = json.loads((tmp_path / "out" / "trainer_kwargs.json").read_text())
    optimizer_kwargs = json.loads((tmp_path / "out" / "optimizer_kwargs.json").read_text())
    model = workload.build_model(ex.HF_ATTN[knobs["attention"]])
    made = {}

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, _):
            return workload.training_loss(self.model, batch)

        def configure_optimizers(self):
            made["optimizer"] = torch.optim.AdamW(self.parameters(), **optimizer_kwargs)
            # As hpo's Lightning loop observes it: the closure (forward, backward, clipping's foreach
            # kernels) runs before the update, so the step's profiler range holds the update alone.
            return _closure_first(made["optimizer"])

    loader = torch.utils.data.DataLoader(examples(workload), batch_size=4)
    trainer = lightning.Trainer(
        **{**trainer_kwargs, "max_steps": 1},
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )

    def run():
        with pinned(ex.winner_of(trial)):
            trainer.fit(Module(), loader)
        return made["optimizer"]

    seen = observe(run)
    for knob in ("precision", "attention", "optimizer"):
        assert seen[knob] == knobs[knob], (knob, seen)
    notes = (tmp_path / "out" / "NOTES.txt").read_text()
    if knobs["grad_checkpointing"]:
        assert "grad_checkpointing: Lightning has no flag" in notes
    if knobs["attention"] == "sdpa_flash":
        assert "Lightning cannot pin an SDPA kernel" in notes and "FLASH_ATTENTION" in notes


def test_a_trial_without_observed_knobs_is_refused(workload):
    trial = trial_with(CASES[0], workload)
    trial.user_attrs["knobs_observed"] = {**CASES[0], "attention": None}
    with pytest.raises(UserInputError, match=r"trial 3: no evidence for \['attention'\]"):
        ex.export_as(trial, "hf", None)


def test_an_optimizer_path_transformers_has_no_string_for_is_refused(workload, tmp_path):
    trial = trial_with({**CASES[0], "optimizer": "foreach"}, workload)  # adamw_torch is the for-loop on CPU
    with pytest.raises(UserInputError, match="optimizer=foreach on cpu: test: transformers .* has no `optim` string"):
        ex.export_as(trial, "hf", tmp_path)
    trial = trial_with({**CASES[0], "optimizer": "apex"}, workload)
    with pytest.raises(UserInputError, match="optimizer=apex on cpu: test: transformers .* has no 'adamw_apex_fused'"):
        ex.export_as(trial, "hf", tmp_path)


def test_export_as_hf_without_transformers_names_the_extra_in_one_line(workload, tmp_path, monkeypatch):
    trial = trial_with(CASES[0], workload)
    monkeypatch.setitem(sys.modules, "transformers", None)  # as when hpo[hf] is not installed
    with pytest.raises(
        UserInputError, match=r"^export --as hf needs transformers, which is not installed: pip install 'hpo\[hf\]'$"
    ):
        ex.export_as(trial, "hf", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_exports_use_the_observed_knobs_not_the_requested_ones(workload, tmp_path):
    trial = trial_with(CASES[0], workload)
    trial.user_attrs["config"]["systems"]["precision"] = "bf16"  # asked for bf16, observed fp32
    ex.export_as(trial, "hf", tmp_path)
    args = json.loads((tmp_path / "training_args.json").read_text())
    assert args["bf16"] is False and args["fp16"] is False


def test_every_attention_value_has_an_attn_implementation_or_is_refused(workload):
    from hpo.knobs.registry import ATTENTION_SPECS

    assert set(ex.HF_ATTN) == set(ATTENTION_SPECS) - {"xformers"}
    with pytest.raises(UserInputError, match="attention=xformers has no attn_implementation"):
        ex.winner_of(trial_with({**CASES[0], "attention": "xformers"}, workload))


def _not_transformers(trial: optuna.trial.FrozenTrial, name: str) -> optuna.trial.FrozenTrial:
    trial.user_attrs["config"]["workload"] = {"name": name, "max_steps": 2}
    return trial


@pytest.mark.parametrize("knobs", CASES, ids=lambda k: k["precision"])
def test_hf_export_suggests_attn_implementation_only_for_a_transformers_model(knobs, workload, tmp_path):
    ex.export_as(trial_with(knobs, workload), "hf", tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "model_kwargs.json").read_text()) == {
        "attn_implementation": ex.HF_ATTN[knobs["attention"]]
    }
    ex.export_as(_not_transformers(trial_with(knobs, workload), "causal_lm"), "hf", tmp_path / "own")
    assert json.loads((tmp_path / "own" / "model_kwargs.json").read_text()) == {}  # hpo's own GPT has no such switch
    args, notes = json.loads((tmp_path / "own" / "training_args.json").read_text()), (tmp_path / "own" / "NOTES.txt").read_text()
    assert f"attention={knobs['attention']}: workload causal_lm builds no transformers model" in notes
    assert f"attention_function({knobs['attention']!r})" in notes and "attn_implementation=" not in notes
    assert not any(value is True for key, value in args.items() if "checkpointing" in key)  # the Trainer's flag would fail
    if knobs["grad_checkpointing"]:
        assert "causal_lm builds no transformers model: wrap each of the workload's checkpoint_blocks" in notes


def test_exports_of_a_users_own_workload_say_attn_implementation_applies_only_to_a_transformers_model(workload, tmp_path):
    trial = _not_transformers(trial_with(CASES[1], workload), "my_models:Resnet")
    ex.export_as(trial, "hf", tmp_path)
    assert json.loads((tmp_path / "model_kwargs.json").read_text()) == {}
    assert "cannot tell whether my_models:Resnet builds a transformers model: if it does" in (tmp_path / "NOTES.txt").read_text()
    assert "if it does, load it with attn_implementation='sdpa'" in ex.export_as(trial, "python", None)


def test_lightning_export_keeps_the_batch_size(workload, tmp_path):
    ex.export_as(trial_with(CASES[0], workload), "lightning", tmp_path)
    assert (
        "# batch_size=4: Lightning's Trainer has none; DataLoader(dataset, batch_size=4)" in (tmp_path / "NOTES.txt").read_text()
    )
