"""Options and metrics of the built-in `hf_causal_lm` workload: a local checkpoint folder and the
user's own text, or a column of a CSV/JSON/JSONL/Parquet file (model: hpo.workloads.hf_causal_lm).

Building the options checks the files, so `hpo validate` refuses a missing column or an empty file."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpo.workloads.options import WorkloadOptions
from hpo.workloads.options.hf_files import TEXT_SUFFIXES, check_columns, check_overrides, read_table
from hpo.workloads.options.hf_models import check_model

__all__ = ["CHECKPOINT_OPTION", "METRICS", "EXTRA", "PACKAGES", "HFCausalLMOptions", "Options"]

METRICS = {"val_loss": "minimize", "val_perplexity": "minimize"}
# Installed by an extra, not with hpo (hpo.deps.EXTRA_PACKAGES): the checkpoint and the user's files.
PACKAGES = ("transformers", "datasets", "huggingface_hub")
EXTRA = "hf"  # the extra of hpo that installs them: `pip install 'hpo[hf]'`
CHECKPOINT_OPTION = "model_name_or_path"  # a local folder or a hub id (hf_models)
DATA_BUILDERS = ("text", "csv", "json", "parquet")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HFCausalLMOptions(WorkloadOptions):
    model_name_or_path: str  # a local folder or a hub id (hf_models): loaded with AutoModelForCausalLM
    train_file: str
    validation_file: str
    text_column: str = "text"  # the column of a data file; a text file is read whole, as one document
    block_size: int = 128  # tokens per training sequence; the texts are joined and cut into blocks
    eval_batches: int = 8  # validation blocks scored: at most eval_batches x 16
    cache_dir: str | None = None  # tokenized data; default $HPO_CACHE_DIR or ~/.cache/hpo/tokenized
    # Config attributes to change when loading, as run_clm.py's --config_overrides: e.g.
    # {attention_probs_dropout_prob: 0.0} (with attention dropout, CPU SDPA runs only its math kernel).
    # Held as sorted (key, value) pairs, so the options stay hashable (their data is cached by them).
    config_overrides: Mapping[str, Any] | None = None

    def overrides(self) -> dict[str, Any]:
        return dict(self.config_overrides or ())

    def __post_init__(self) -> None:
        object.__setattr__(self, "config_overrides", check_overrides(self.config_overrides))
        for name in ("block_size", "eval_batches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be an integer >= 1, but got {value!r}")
        check_model("model_name_or_path", self.model_name_or_path)
        for key in ("train_file", "validation_file"):
            path = getattr(self, key)
            table = read_table(key, path, DATA_BUILDERS)
            column = self.column_of(path)
            check_columns(key, path, table, {"text_column": column})
            if not any(isinstance(t, str) and t.strip() for t in table[column]):
                raise ValueError(f"{key}: {path!r} holds no text")

    def column_of(self, path: str) -> str:
        """A text file is read as one document in a column named "text"; a data file's is text_column."""
        return "text" if Path(path).suffix.lower() in TEXT_SUFFIXES else self.text_column


Options = HFCausalLMOptions
