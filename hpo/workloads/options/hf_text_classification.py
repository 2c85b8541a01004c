"""Options and metrics of the built-in `hf_text_classification` workload: a local checkpoint folder
and the user's own CSV/JSON/JSONL/Parquet files (model: hpo.workloads.hf_text_classification).

Building the options checks the files, so `hpo validate` refuses a missing column, an empty file or
labels that differ between train and validation before any trial runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hpo.workloads.options import WorkloadOptions
from hpo.workloads.options.hf_files import check_columns, check_overrides, read_table, sorted_labels
from hpo.workloads.options.hf_models import check_model

__all__ = ["CHECKPOINT_OPTION", "METRICS", "EXTRA", "PACKAGES", "HFTextClassificationOptions", "Options"]

METRICS = {"val_accuracy": "maximize", "val_f1": "maximize", "val_loss": "minimize"}
# Installed by an extra, not with hpo (hpo.deps.EXTRA_PACKAGES): the checkpoint and the user's files.
PACKAGES = ("transformers", "datasets", "huggingface_hub")
EXTRA = "hf"  # the extra of hpo that installs them: `pip install 'hpo[hf]'`
CHECKPOINT_OPTION = "model_name_or_path"  # a local folder or a hub id (hf_models)
DATA_BUILDERS = ("csv", "json", "parquet")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HFTextClassificationOptions(WorkloadOptions):
    model_name_or_path: str  # a local folder or a hub id (hf_models): loaded with AutoModelForSequenceClassification
    train_file: str
    validation_file: str
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    max_length: int = 128  # texts are truncated to this many tokens; batches pad to their longest
    cache_dir: str | None = None  # tokenized data; default $HPO_CACHE_DIR or ~/.cache/hpo/tokenized
    # Config attributes to change when loading, as run_clm.py's --config_overrides: e.g.
    # {attention_probs_dropout_prob: 0.0} (with attention dropout, CPU SDPA runs only its math kernel).
    # Held as sorted (key, value) pairs, so the options stay hashable (their data is cached by them).
    config_overrides: Mapping[str, Any] | None = None

    def overrides(self) -> dict[str, Any]:
        return dict(self.config_overrides or ())

    def __post_init__(self) -> None:
        object.__setattr__(self, "config_overrides", check_overrides(self.config_overrides))
        if isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 2:
            raise ValueError(f"max_length: must be an integer >= 2, but got {self.max_length!r}")
        check_model("model_name_or_path", self.model_name_or_path)
        labels = self._label_sets()
        only_train, only_val = labels["train_file"] - labels["validation_file"], labels["validation_file"] - labels["train_file"]
        if only_train or only_val:
            raise ValueError(
                f"label_column: the label sets of train_file and validation_file must be the same, but labels "
                f"{sorted(only_train, key=str)} are only in train_file and {sorted(only_val, key=str)} only in validation_file"
            )
        if len(labels["train_file"]) < 2:
            raise ValueError(f"label_column: at least 2 labels are needed, but got {sorted(labels['train_file'], key=str)}")

    def _label_sets(self) -> dict[str, set]:
        """Each file's set of labels, once its columns are checked."""
        columns = {"text_column": self.text_column, "text_pair_column": self.text_pair_column, "label_column": self.label_column}
        labels = {}
        for key in ("train_file", "validation_file"):
            path = getattr(self, key)
            table = read_table(key, path, DATA_BUILDERS)
            check_columns(key, path, table, columns)
            try:
                labels[key] = set(sorted_labels(table[self.label_column]))
            except ValueError as exc:
                raise ValueError(f"label_column: {exc} in {key} {path!r}") from None
        return labels

    def labels(self) -> tuple:
        """The label values in the order of the model's class indices."""
        return sorted_labels(read_table("train_file", self.train_file, DATA_BUILDERS)[self.label_column])


Options = HFTextClassificationOptions
