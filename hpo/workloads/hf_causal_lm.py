"""Train the user's own local causal LM checkpoint on the user's own text, no code: the
`run_clm.py` habit (`model_name_or_path`, `train_file`, `validation_file`, `block_size`) as an hpo
workload. The texts of each file are tokenized, joined with the tokenizer's end-of-text token and
cut into blocks; training draws seeded random blocks, validation scores fixed consecutive ones.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from hpo.errors import UserInputError
from hpo.logging import get_logger
from hpo.workloads.base import Batch, MoveFn, Workload
from hpo.workloads.hf_common import cache_folder, cache_key, cached, checkpoint_layers, load_pretrained, load_tokenizer
from hpo.workloads.options.hf_causal_lm import DATA_BUILDERS, METRICS, HFCausalLMOptions
from hpo.workloads.options.hf_files import read_table

logger = get_logger(__name__)

EVAL_BATCH_SIZE = 16


@functools.lru_cache(maxsize=4)
def load_tokens(options: HFCausalLMOptions) -> dict[str, torch.Tensor]:
    """{"train", "validation"}: each file's texts as one token stream; from the on-disk cache when
    these files were tokenized with this tokenizer before."""
    o = options
    settings = {"task": "causal_lm", "columns": [o.column_of(o.train_file), o.column_of(o.validation_file)]}
    key = cache_key([o.train_file, o.validation_file], o.model_name_or_path, settings)
    start = time.perf_counter()
    data, hit = cached(cache_folder(o.cache_dir), key, lambda: _tokenize(o))
    logger.info("tokenized data %s in %.2f s (%s)", "loaded" if hit else "built", time.perf_counter() - start, key)
    return data


def _tokenize(o: HFCausalLMOptions) -> dict[str, torch.Tensor]:
    tokenizer = load_tokenizer(o.model_name_or_path)
    sep = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    out = {}
    for split, path in (("train", o.train_file), ("validation", o.validation_file)):
        texts = [t for t in read_table(f"{split}_file", path, DATA_BUILDERS)[o.column_of(path)] if isinstance(t, str) and t]
        # verbose=False: a document longer than the model's positions is expected here; it is cut into blocks.
        ids = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
        out[split] = torch.tensor([t for row in ids for t in [*row, *sep]], dtype=torch.long)
    return out


class HFCausalLM(Workload):
    """Causal language modelling with any local transformers checkpoint and the user's own text."""

    Options = HFCausalLMOptions
    metrics = METRICS
    model_reads_hparams = False

    def __init__(self, options: HFCausalLMOptions):
        super().__init__(options)
        self.options: HFCausalLMOptions = options
        tokens = load_tokens(options)
        self.train_data, self.val_data = tokens["train"], tokens["validation"]
        need = options.block_size + 1
        for key, data in (("train_file", self.train_data), ("validation_file", self.val_data)):
            if len(data) < need:
                raise UserInputError(
                    f"workload.{key}: {getattr(options, key)!r} is {len(data)} tokens, fewer than block_size + 1 = {need}"
                )

    def build_model(self, attention: str) -> nn.Module:
        model = load_pretrained(
            "AutoModelForCausalLM", self.options.model_name_or_path, attention, self.options.seed, self.options.overrides()
        )
        positions = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
        if positions is not None and self.options.block_size > positions:
            raise UserInputError(f"workload.block_size: {self.options.block_size} exceeds the model's {positions} positions")
        return model

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        return checkpoint_layers(model)

    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]:
        generator = torch.Generator().manual_seed(seed)
        span = self.options.block_size + 1
        while True:
            starts = torch.randint(0, len(self.train_data) - span + 1, (batch_size,), generator=generator)
            yield {"tokens": torch.stack([self.train_data[s : s + span] for s in starts.tolist()])}

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        tokens = batch["tokens"]
        logits = model(input_ids=tokens[:, :-1], use_cache=False).logits
        return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())

    def eval_windows(self) -> torch.Tensor:
        """The validation blocks (block_size + 1 tokens each) that `evaluate` scores."""
        span = self.options.block_size + 1
        windows = self.val_data[: (len(self.val_data) // span) * span].view(-1, span)
        return windows[: self.options.eval_batches * EVAL_BATCH_SIZE]

    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]:
        windows = self.eval_windows()
        total = sum(self.training_loss(model, move({"tokens": c})).item() * len(c) for c in windows.split(EVAL_BATCH_SIZE))
        loss = total / len(windows)
        return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 50.0))}
