"""Every built-in workload at its smallest, with every dropout it has turned up: what a test that
must hold for each built-in workload runs (`tests/verify/test_probe_train_mode.py`, the fault
matrix). `TINY_OPTIONS` names every key of `BUILTIN_WORKLOADS`, so a new built-in workload fails
those tests until it is added here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hf_fixtures import TEXT, tiny_bert, tiny_gpt2, topic_files

from hpo.config.trial import Knobs, TrainingConfig, TrialConfig

_CAUSAL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 16, "dropout": 0.5, "corpus_bytes": 20_000, "eval_batches": 1}


def _hf_text(folder: Path) -> dict:
    train, val = topic_files(folder)
    model = tiny_bert(folder / "bert", hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5)
    return {
        "model_name_or_path": str(model),
        "train_file": str(train),
        "validation_file": str(val),
        "cache_dir": str(folder / "cache"),
    }


def _hf_causal(folder: Path) -> dict:
    (folder / "train.txt").write_text(TEXT)
    (folder / "val.txt").write_text(TEXT[: len(TEXT) // 4])
    model = tiny_gpt2(folder / "gpt2", TEXT)
    return {
        "model_name_or_path": str(model),
        "train_file": str(folder / "train.txt"),
        "validation_file": str(folder / "val.txt"),
        "block_size": 16,
        "cache_dir": str(folder / "cache"),
        "config_overrides": {"resid_pdrop": 0.5, "attn_pdrop": 0.5, "embd_pdrop": 0.5},
    }


TINY_OPTIONS: dict[str, Callable[[Path], dict]] = {
    "text_classification": lambda folder: {
        "model": "tiny",
        "dropout": 0.5,
        "attention_dropout": 0.5,
        "n_train": 32,
        "n_eval": 16,
    },
    "timeseries_classification": lambda folder: {
        "window": 16,
        "conv_channels": 8,
        "lstm_hidden": 8,
        "lstm_layers": 2,
        "attention_heads": 2,
        "dropout": 0.5,
    },  # fmt: skip
    "causal_lm": lambda folder: dict(_CAUSAL),
    "causal_lm_lightning": lambda folder: dict(_CAUSAL),
    "hf_text_classification": _hf_text,
    "hf_causal_lm": _hf_causal,
    "png_images": lambda folder: {
        "images": 16,
        "size": 16,
        "crop": 12,
        "width": 4,
        "dropout": 0.5,
        "cache_dir": str(folder / "png"),
    },
}


def builtin_config(name: str, folder: Path, knobs: Knobs, *, max_steps: int = 2) -> TrialConfig:
    return TrialConfig(
        workload=name,
        workload_options=TINY_OPTIONS[name](folder),
        training=TrainingConfig(lr=1e-3, batch_size=8, max_steps=max_steps, eval_every=max_steps),
        knobs=knobs,
        seed=0,
        objectives=("val_loss",),
        directions=("minimize",),
        device="cpu",
        skip_slow=False,  # these tests are about what runs, not how fast
    )
