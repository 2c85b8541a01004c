"""Fine-tune the user's own local checkpoint on the user's own labelled files, no code: the
`run_glue.py` habit (`model_name_or_path`, `train_file`, `validation_file`) as an hpo workload.

The model is loaded with `AutoModelForSequenceClassification` from a local folder (offline forced);
the files are read with `datasets`; labels may be strings. Each batch is padded to its longest text.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from hpo.errors import UserInputError
from hpo.logging import get_logger
from hpo.torch_compat import mark_dynamic_width
from hpo.workloads.base import Batch, MoveFn, Workload
from hpo.workloads.hf_common import (
    cache_folder,
    cache_key,
    cached,
    checkpoint_layers,
    load_pretrained,
    load_tokenizer,
    pad_rows,
    ragged,
)
from hpo.workloads.options.hf_files import read_table
from hpo.workloads.options.hf_text_classification import DATA_BUILDERS, METRICS, HFTextClassificationOptions

logger = get_logger(__name__)

EVAL_BATCH_SIZE = 32
WIDTH_MULTIPLE = 8
TOKEN_KEYS = ("input_ids", "token_type_ids")


@functools.lru_cache(maxsize=4)
def load_data(options: HFTextClassificationOptions) -> dict:
    """{"labels": label values, "train"/"validation": {key: ragged tokens, "labels": tensor},
    "pad": pad id}; read from the on-disk cache when these files were tokenized before."""
    o = options
    settings = {
        "task": "text_classification",
        "max_length": o.max_length,
        "columns": [o.text_column, o.text_pair_column, o.label_column],
    }
    key = cache_key([o.train_file, o.validation_file], o.model_name_or_path, settings)
    start = time.perf_counter()
    data, hit = cached(cache_folder(o.cache_dir), key, lambda: _tokenize(o))
    logger.info("tokenized data %s in %.2f s (%s)", "loaded" if hit else "built", time.perf_counter() - start, key)
    return data


def _tokenize(o: HFTextClassificationOptions) -> dict:
    tokenizer = load_tokenizer(o.model_name_or_path)
    if tokenizer.pad_token_id is None:
        raise UserInputError(f"workload.model_name_or_path: the tokenizer in {o.model_name_or_path!r} has no pad token")
    labels = o.labels()
    index = {label: i for i, label in enumerate(labels)}
    out: dict = {"labels": [str(v) for v in labels], "pad": tokenizer.pad_token_id}
    for split, path in (("train", o.train_file), ("validation", o.validation_file)):
        table = read_table(f"{split}_file", path, DATA_BUILDERS)
        texts = [str(t) for t in table[o.text_column]]
        pairs = [str(t) for t in table[o.text_pair_column]] if o.text_pair_column else None
        encoded = tokenizer(texts, pairs, truncation=True, max_length=o.max_length)
        out[split] = {k: ragged(encoded[k]) for k in TOKEN_KEYS if k in encoded}
        out[split]["labels"] = torch.tensor([index[v] for v in table[o.label_column]])
    return out


class HFTextClassification(Workload):
    """Sequence classification with any local transformers checkpoint and the user's own files."""

    Options = HFTextClassificationOptions
    metrics = METRICS
    model_reads_hparams = False

    def __init__(self, options: HFTextClassificationOptions):
        super().__init__(options)
        self.options: HFTextClassificationOptions = options
        self.data = load_data(options)
        lengths = self.data["validation"]["input_ids"]["lengths"]
        self.eval_order = torch.argsort(lengths, stable=True)  # similar lengths share a batch

    def build_model(self, attention: str) -> nn.Module:
        names = self.data["labels"]
        return load_pretrained(
            "AutoModelForSequenceClassification",
            self.options.model_name_or_path,
            attention,
            self.options.seed,
            self.options.overrides(),
            num_labels=len(names),
            id2label=dict(enumerate(names)),
            label2id={n: i for i, n in enumerate(names)},
            ignore_mismatched_sizes=True,  # a checkpoint trained on other labels gets a new head
        )

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        return checkpoint_layers(model)

    def batch(self, split: str, idx: torch.Tensor) -> Batch:
        """Rows `idx` of a split, padded to their longest text."""
        data, cap = self.data[split], self.options.max_length
        ids = pad_rows(data["input_ids"], idx, self.data["pad"], WIDTH_MULTIPLE, cap)
        lengths = data["input_ids"]["lengths"][idx]
        batch = {"input_ids": ids, "attention_mask": (torch.arange(ids.shape[1]) < lengths[:, None]).long()}
        if "token_type_ids" in data:
            batch["token_type_ids"] = pad_rows(data["token_type_ids"], idx, 0, WIDTH_MULTIPLE, cap)
        batch["labels"] = data["labels"][idx]
        return batch

    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]:
        """Endless full batches from successive seeded permutations."""
        n = len(self.data["train"]["labels"])
        g = torch.Generator().manual_seed(seed)
        pending = torch.empty(0, dtype=torch.long)
        while True:
            while len(pending) < batch_size:
                pending = torch.cat([pending, torch.randperm(n, generator=g)])
            idx, pending = pending[:batch_size], pending[batch_size:]
            yield self.batch("train", idx)

    def _logits(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        for value in inputs.values():  # widths vary by batch: one compiled graph for all of them
            mark_dynamic_width(value, 1)
        return model(**inputs).logits.float()

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(self._logits(model, batch), batch["labels"])

    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]:
        n_classes = len(self.data["labels"])
        confusion = torch.zeros(n_classes, n_classes, dtype=torch.long)
        total_loss = 0.0
        for idx in self.eval_order.split(EVAL_BATCH_SIZE):
            batch = move(self.batch("validation", idx))
            logits = self._logits(model, batch)
            total_loss += F.cross_entropy(logits, batch["labels"], reduction="sum").item()
            pairs = batch["labels"].cpu() * n_classes + logits.argmax(-1).cpu()
            confusion += torch.bincount(pairs, minlength=n_classes * n_classes).view(n_classes, n_classes)
        n = int(confusion.sum())
        return {"val_accuracy": confusion.diag().sum().item() / n, "val_f1": macro_f1(confusion), "val_loss": total_loss / n}


def macro_f1(confusion: torch.Tensor) -> float:
    """Unweighted mean of per-class F1 (rows: true class, columns: predicted); a class never
    predicted correctly scores 0 (scikit-learn's f1_score(average="macro"))."""
    tp = confusion.diag().double()
    denom = confusion.sum(0).double() + confusion.sum(1).double()
    f1 = torch.where(denom > 0, 2 * tp / denom.clamp(min=1), torch.zeros_like(tp))
    return f1.mean().item()
