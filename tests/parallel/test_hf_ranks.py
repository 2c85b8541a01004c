"""The Hugging Face no-code workloads as 2 ranks over real gloo on the CPU: text classification on the
pretrained MiniLM an installed package ships (offline) and causal LM on a tiny GPT-2, under DDP and
under FSDP2, with the same losses as one process at the same global batch, within the rounding
bound; and the model trained in train mode on a rank, as hpo's one-process loop trains it."""

from __future__ import annotations

import pytest
from hf_fixtures import TEXT, tiny_bert, tiny_gpt2, topic_files
from hub_cache import package_model
from parallel_ranks import assert_parity, no_rank_left_behind, two_rank_config  # noqa: F401 (autouse)

from hpo.parallel import run_ranks, train_on_rank
from hpo.workloads.hf_text_classification import HFTextClassification

# Dropout off: each rank draws its own dropout masks for its rows, one process draws them for the
# whole batch, so with dropout on the losses differ by more than rounding.
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def _hf_workload(tmp_path, model: str, **extra) -> dict:
    train, validation = topic_files(tmp_path)
    return {
        "name": "hf_text_classification",
        "model_name_or_path": model,
        "train_file": str(train),
        "validation_file": str(validation),
        "cache_dir": str(tmp_path / "cache"),
        "max_length": 16,
        **extra,
    }


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_minilm_text_classification_as_two_ranks_trains_as_one_process(tmp_path, strategy):
    workload = _hf_workload(tmp_path, str(package_model()), config_overrides=NO_DROPOUT)
    config = two_rank_config(strategy, workload=workload, max_steps=2)
    outcome = run_ranks(config, deadline_s=300)
    assert_parity(config, outcome)
    record = outcome.record()
    assert (record["global_batch"], record["batch_per_rank_seen"]) == (8, 4)
    collective = "all_reduce" if strategy == "ddp" else "reduce_scatter"
    assert record["wire"][collective]["dtypes"] == ["float32"]
    assert set(outcome.ranks[0]["metrics"]) == {"val_accuracy", "val_f1", "val_loss"}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_gpt2_causal_lm_as_two_ranks_trains_as_one_process(tmp_path, strategy):
    (tmp_path / "train.txt").write_text(TEXT)
    (tmp_path / "validation.txt").write_text(TEXT[: len(TEXT) // 4])
    workload = {
        "name": "hf_causal_lm",
        "model_name_or_path": str(tiny_gpt2(tmp_path / "gpt2", TEXT)),
        "train_file": str(tmp_path / "train.txt"),
        "validation_file": str(tmp_path / "validation.txt"),
        "block_size": 16,
        "cache_dir": str(tmp_path / "cache"),
        "config_overrides": {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},  # GPT-2's dropouts
    }
    config = two_rank_config(strategy, workload=workload, max_steps=3)
    outcome = run_ranks(config, deadline_s=300)
    assert_parity(config, outcome)
    assert set(outcome.ranks[0]["metrics"]) == {"val_loss", "val_perplexity"}


def test_a_rank_trains_a_checkpoint_in_train_mode(tmp_path, monkeypatch):
    """transformers loads a checkpoint in eval mode; a rank trains it with its dropout on, as hpo's
    one-process loop does (only FSDP2's wrap used to turn train mode on: DDP ranks, and the one
    process their losses are compared with, trained without dropout)."""
    modes = []
    loss = HFTextClassification.training_loss

    def seen(self, model, batch):
        modes.append(model.training)
        return loss(self, model, batch)

    monkeypatch.setattr(HFTextClassification, "training_loss", seen)
    workload = _hf_workload(tmp_path, str(tiny_bert(tmp_path / "tiny-bert", hidden_dropout_prob=0.1)))
    train_on_rank(two_rank_config("ddp", workload=workload, max_steps=2))
    # The probe's steps come first (its compared step runs in eval mode: no dropout to compare
    # through); the trial's own two training steps are the last two.
    assert modes[-2:] == [True, True]
