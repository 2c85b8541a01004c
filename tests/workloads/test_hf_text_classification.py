from __future__ import annotations

import math

import pytest
import torch
from hf_fixtures import tiny_bert, topic_files, write_rows
from torch.profiler import ProfilerActivity, profile

from hpo.errors import KnobUnavailable, UserInputError
from hpo.knobs.attention_kernels import pinned_kernel
from hpo.knobs.recompute import RecomputeCounter, enable_checkpointing
from hpo.workloads import hf_text_classification as hftc
from hpo.workloads.catalog import create_workload, parse_options


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture
def files(tmp_path):
    return topic_files(tmp_path)


def options(model_dir, files, tmp_path, **extra) -> dict:
    train, val = files
    return {
        "model_name_or_path": str(model_dir),
        "train_file": str(train),
        "validation_file": str(val),
        "cache_dir": str(tmp_path / "cache"),
        **extra,
    }


def test_trains_and_reports_accuracy_f1_and_loss_with_string_labels(model_dir, files, tmp_path):
    workload = create_workload("hf_text_classification", options(model_dir, files, tmp_path))
    assert workload.data["labels"] == ["food", "sport"]
    model = workload.build_model("sdpa")
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    batch = next(workload.train_batches(8, seed=0))
    assert batch["input_ids"].shape[1] % hftc.WIDTH_MULTIPLE == 0 or batch["input_ids"].shape[1] == 128
    assert batch["attention_mask"].sum(1).max() <= batch["input_ids"].shape[1]
    losses = []
    for _ in range(5):
        loss = workload.training_loss(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    with torch.inference_mode():
        metrics = workload.evaluate(model.eval(), lambda b: b)
    assert set(metrics) == set(hftc.HFTextClassification.metrics) == {"val_accuracy", "val_f1", "val_loss"}
    assert all(math.isfinite(v) for v in metrics.values()) and 0 <= metrics["val_f1"] <= 1


def test_batches_pad_to_their_longest_text(model_dir, files, tmp_path):
    workload = create_workload("hf_text_classification", options(model_dir, files, tmp_path, max_length=64))
    lengths = workload.data["train"]["input_ids"]["lengths"]
    batch = workload.batch("train", torch.tensor([0, 1]))
    longest = int(lengths[:2].max())
    assert batch["input_ids"].shape[1] == -(-longest // 8) * 8 < 64
    assert batch["attention_mask"].sum(1).tolist() == lengths[:2].tolist()


def test_macro_f1_matches_the_definition():
    confusion = torch.tensor([[3, 1], [2, 4]])  # rows true, columns predicted
    f1_a, f1_b = 2 * 3 / (2 * 3 + 1 + 2), 2 * 4 / (2 * 4 + 2 + 1)
    assert hftc.macro_f1(confusion) == pytest.approx((f1_a + f1_b) / 2)


def test_attention_maps_onto_attn_implementation_and_changes_the_kernel(model_dir, files, tmp_path):
    workload = create_workload("hf_text_classification", options(model_dir, files, tmp_path))
    batch = next(workload.train_batches(4, seed=0))
    ops = {}
    for attention in ("eager", "sdpa", "sdpa_math"):
        model = workload.build_model(attention)
        assert model.config._attn_implementation == ("eager" if attention == "eager" else "sdpa")
        with pinned_kernel(attention), profile(activities=[ProfilerActivity.CPU]) as prof:
            workload.training_loss(model, batch).backward()
        ops[attention] = {e.key for e in prof.key_averages()}
    assert not any("scaled_dot_product" in op for op in ops["eager"])
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops["sdpa"]
    assert "aten::_scaled_dot_product_attention_math" in ops["sdpa_math"]


def test_a_model_class_without_sdpa_is_a_verdict_not_a_fallback(model_dir, files, tmp_path, monkeypatch):
    from transformers import BertForSequenceClassification

    monkeypatch.setattr(BertForSequenceClassification, "_supports_sdpa", False)
    workload = create_workload("hf_text_classification", options(model_dir, files, tmp_path))
    with pytest.raises(KnobUnavailable, match="incompatible: attention=sdpa"):
        workload.build_model("sdpa")


def test_flash_attention_2_without_the_package_is_a_verdict(model_dir, files, tmp_path):
    from hpo import deps

    if deps.is_installed("flash_attn"):
        pytest.skip("flash_attn is installed")
    workload = create_workload("hf_text_classification", options(model_dir, files, tmp_path))
    with pytest.raises(KnobUnavailable, match="incompatible"):
        workload.build_model("flash_attn")


def test_checkpointing_recomputes_the_models_own_checkpointing_layers(model_dir, files, tmp_path):
    workload = create_workload("hf_text_classification", options(model_dir, files, tmp_path))
    model = workload.build_model("eager")
    blocks = workload.checkpoint_blocks(model)
    assert list(blocks) == list(model.bert.encoder.layer)
    counter = RecomputeCounter()
    enable_checkpointing(blocks, counter)
    workload.training_loss(model, next(workload.train_batches(4, seed=0))).backward()
    assert (counter.forward_runs, counter.backward_runs) == (2, 2)


def test_tokenized_data_is_cached_on_disk_per_files_tokenizer_and_max_length(model_dir, files, tmp_path):
    raw = options(model_dir, files, tmp_path)
    hftc.load_data.cache_clear()
    create_workload("hf_text_classification", raw)
    cached = sorted((tmp_path / "cache").glob("*.pt"))
    assert len(cached) == 1
    hftc.load_data.cache_clear()
    again = create_workload("hf_text_classification", raw)  # a later trial: read from disk
    assert sorted((tmp_path / "cache").glob("*.pt")) == cached and again.data["labels"] == ["food", "sport"]
    create_workload("hf_text_classification", {**raw, "max_length": 16})
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2


def test_jsonl_and_parquet_and_text_pairs(model_dir, tmp_path):
    rows = [{"a": f"text {i}", "b": f"pair {i}", "y": i % 3} for i in range(12)]
    for suffix in (".jsonl", ".parquet"):
        train, val = write_rows(tmp_path / f"t{suffix}", rows), write_rows(tmp_path / f"v{suffix}", rows[:6])
        raw = {
            "model_name_or_path": str(model_dir),
            "train_file": str(train),
            "validation_file": str(val),
            "text_column": "a",
            "text_pair_column": "b",
            "label_column": "y",
            "cache_dir": str(tmp_path / "cache"),
        }
        workload = create_workload("hf_text_classification", raw)
        assert workload.data["labels"] == ["0", "1", "2"]
        batch = next(workload.train_batches(4, seed=0))
        assert "token_type_ids" in batch and batch["token_type_ids"].max() == 1


@pytest.mark.parametrize(
    "change, match",
    [
        (  # offline (tests/conftest.py), and the test's own empty hub cache lacks it
            {"model_name_or_path": "bert-base-uncased"},
            "'bert-base-uncased' is not in the Hugging Face cache .* and HF_HUB_OFFLINE is set",
        ),
        ({"model_name_or_path": "models/bert/v1"}, "is not a local folder nor a Hugging Face hub id"),
        ({"text_column": "sentence"}, "text_column: column 'sentence' is not in train_file"),
        ({"train_file": "missing.csv"}, "train_file: 'missing.csv' does not exist"),
        ({"train_file": "data.xlsx"}, "train_file: 'data.xlsx' must be a file ending in one of"),
        ({"max_length": 1}, "max_length"),
    ],
)
def test_bad_options_are_refused_before_any_trial(model_dir, files, tmp_path, monkeypatch, change, match):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(UserInputError, match=match):
        parse_options("hf_text_classification", {**options(model_dir, files, tmp_path), **change})


def test_empty_file_and_differing_label_sets_are_refused(model_dir, files, tmp_path):
    raw = options(model_dir, files, tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(UserInputError, match="validation_file: .* is empty"):
        parse_options("hf_text_classification", {**raw, "validation_file": str(empty)})
    header_only = tmp_path / "header.csv"
    header_only.write_text("text,label\n")
    with pytest.raises(UserInputError, match="holds no rows"):
        parse_options("hf_text_classification", {**raw, "validation_file": str(header_only)})
    other = write_rows(tmp_path / "other.csv", [{"text": "x", "label": "food"}, {"text": "y", "label": "weather"}])
    with pytest.raises(
        UserInputError, match=r"label sets .* \['sport'\] are only in train_file and \['weather'\] only in validation_file"
    ):
        parse_options("hf_text_classification", {**raw, "validation_file": str(other)})


@pytest.mark.slow
def test_a_compiled_model_trains_and_evaluates_batches_of_every_width(model_dir, files, tmp_path):
    from hpo.config.trial import Knobs, TrainingConfig
    from hpo.engine import AssembledModel

    torch._dynamo.reset()
    workload = create_workload("hf_text_classification", options(model_dir, files, tmp_path))
    knobs = Knobs(compile="default", precision="fp32", attention="sdpa", optimizer="fused")
    training = TrainingConfig(lr=1e-3, batch_size=4, max_steps=3, eval_every=3, compile_backend="eager")
    assembled = AssembledModel(workload, knobs, training, torch.device("cpu"))
    widths = set()
    for _, batch in zip(range(3), workload.train_batches(4, seed=0)):
        widths.add(batch["input_ids"].shape[1])
        assembled.forward_backward(assembled.move(batch))
        assembled.optimizer_step()
    metrics = assembled.evaluate()  # under the executor's rule that a recompile past the limit fails
    assert set(metrics) == {"val_accuracy", "val_f1", "val_loss"} and assembled.graphs.graphs >= 1


def test_config_overrides_change_the_loaded_config_and_unknown_keys_are_one_line(model_dir, files, tmp_path):
    raw = options(model_dir, files, tmp_path, config_overrides={"hidden_dropout_prob": 0.3})
    model = create_workload("hf_text_classification", raw).build_model("eager")
    assert model.config.hidden_dropout_prob == 0.3
    with pytest.raises(UserInputError, match=r"config_overrides: \['hiden_dropout'\] are not attributes"):
        create_workload("hf_text_classification", {**raw, "config_overrides": {"hiden_dropout": 0.3}}).build_model("eager")
    with pytest.raises(UserInputError, match="workload.config_overrides: expected a mapping"):
        parse_options("hf_text_classification", {**raw, "config_overrides": [1, 2]})
