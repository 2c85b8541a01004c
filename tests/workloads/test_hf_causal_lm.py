from __future__ import annotations

import math

import pytest
import torch
from hf_fixtures import TEXT, tiny_gpt2, write_rows
from torch.profiler import ProfilerActivity, profile

from hpo.errors import KnobUnavailable, UserInputError
from hpo.knobs.attention_kernels import pinned_kernel
from hpo.knobs.recompute import RecomputeCounter, enable_checkpointing
from hpo.workloads import hf_causal_lm
from hpo.workloads.catalog import create_workload, parse_options


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"), TEXT)


def options(model_dir, tmp_path, **extra) -> dict:
    (tmp_path / "train.txt").write_text(TEXT)
    (tmp_path / "val.txt").write_text(TEXT[: len(TEXT) // 4])
    return {
        "model_name_or_path": str(model_dir),
        "train_file": str(tmp_path / "train.txt"),
        "validation_file": str(tmp_path / "val.txt"),
        "block_size": 16,
        "cache_dir": str(tmp_path / "cache"),
        **extra,
    }


def test_trains_and_reports_loss_and_perplexity(model_dir, tmp_path):
    workload = create_workload("hf_causal_lm", options(model_dir, tmp_path))
    model = workload.build_model("sdpa")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = next(workload.train_batches(8, seed=0))
    assert batch["tokens"].shape == (8, 17)
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
    assert set(metrics) == {"val_loss", "val_perplexity"}
    assert metrics["val_perplexity"] == pytest.approx(math.exp(metrics["val_loss"]))


def test_a_column_of_a_data_file_is_text_too(model_dir, tmp_path):
    rows = [{"body": line} for line in TEXT.splitlines() if line]
    raw = options(model_dir, tmp_path, text_column="body")
    raw["train_file"] = str(write_rows(tmp_path / "t.jsonl", rows))
    workload = create_workload("hf_causal_lm", raw)
    assert len(workload.train_data) > 100
    with pytest.raises(UserInputError, match="text_column: column 'text' is not in train_file"):
        parse_options("hf_causal_lm", {**raw, "text_column": "text"})


def test_attention_knob_and_verdicts(model_dir, tmp_path, monkeypatch):
    workload = create_workload("hf_causal_lm", options(model_dir, tmp_path))
    batch = next(workload.train_batches(2, seed=0))
    for attention, op in (
        ("sdpa", "aten::_scaled_dot_product_flash_attention_for_cpu"),
        ("sdpa_math", "aten::_scaled_dot_product_attention_math"),
    ):
        model = workload.build_model(attention)
        with pinned_kernel(attention), profile(activities=[ProfilerActivity.CPU]) as prof:
            workload.training_loss(model, batch).backward()
        assert op in {e.key for e in prof.key_averages()}
    from transformers import GPT2LMHeadModel

    monkeypatch.setattr(GPT2LMHeadModel, "_supports_sdpa", False)
    with pytest.raises(KnobUnavailable, match="incompatible: attention=sdpa"):
        workload.build_model("sdpa")


def test_checkpointing_recomputes_the_decoder_layers(model_dir, tmp_path):
    workload = create_workload("hf_causal_lm", options(model_dir, tmp_path))
    model = workload.build_model("eager")
    blocks = workload.checkpoint_blocks(model)
    assert list(blocks) == list(model.transformer.h)
    counter = RecomputeCounter()
    enable_checkpointing(blocks, counter)
    workload.training_loss(model, next(workload.train_batches(2, seed=0))).backward()
    assert (counter.forward_runs, counter.backward_runs) == (2, 2)


def test_tokens_are_cached_on_disk(model_dir, tmp_path):
    raw = options(model_dir, tmp_path)
    hf_causal_lm.load_tokens.cache_clear()
    first = create_workload("hf_causal_lm", raw)
    hf_causal_lm.load_tokens.cache_clear()
    second = create_workload("hf_causal_lm", raw)
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 1
    assert torch.equal(first.train_data, second.train_data)


def test_bad_inputs_are_one_line(model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # empty, and offline (tests/conftest.py)
    raw = options(model_dir, tmp_path)
    (tmp_path / "blank.txt").write_text("\n\n")
    with pytest.raises(UserInputError, match="validation_file: .* holds no text"):
        parse_options("hf_causal_lm", {**raw, "validation_file": str(tmp_path / "blank.txt")})
    with pytest.raises(UserInputError, match="'gpt2' is not in the Hugging Face cache"):
        parse_options("hf_causal_lm", {**raw, "model_name_or_path": "gpt2"})
    (tmp_path / "short.txt").write_text("def add")
    with pytest.raises(UserInputError, match="fewer than block_size"):
        create_workload("hf_causal_lm", {**raw, "validation_file": str(tmp_path / "short.txt")})
    with pytest.raises(UserInputError, match="block_size: 128 exceeds the model's 64 positions"):
        create_workload("hf_causal_lm", {**raw, "block_size": 128}).build_model("eager")
