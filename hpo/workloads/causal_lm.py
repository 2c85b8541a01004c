"""A small GPT-style decoder trained as a byte-level language model on the Python standard
library's own source files (present on every machine, so nothing is downloaded)."""

from __future__ import annotations

import functools
import math
import sysconfig
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from hpo.knobs.attention_kernels import attention_function
from hpo.workloads.base import Batch, MoveFn, Workload
from hpo.workloads.options.causal_lm import METRICS, CausalLMOptions

EVAL_BATCH_SIZE = 16

# Fixed, version-stable modules: the corpus is the same files on every machine with this Python.
CORPUS_MODULES = (
    "argparse",
    "collections/__init__",
    "dataclasses",
    "functools",
    "inspect",
    "json/decoder",
    "pathlib",
    "shutil",
    "subprocess",
    "textwrap",
    "threading",
    "typing",
)


@functools.cache
def load_corpus(n_bytes: int) -> torch.Tensor:
    """The corpus as a uint8 tensor: the CORPUS_MODULES' source, concatenated and truncated."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = b"".join((stdlib / f"{name}.py").read_bytes() for name in CORPUS_MODULES)
    return torch.frombuffer(bytearray(text[:n_bytes]), dtype=torch.uint8).long()


class Block(nn.Module):
    def __init__(self, opts: CausalLMOptions, attention):
        super().__init__()
        self.n_heads, self.attention, self.dropout = opts.n_heads, attention, opts.dropout
        self.ln1, self.ln2 = nn.LayerNorm(opts.d_model), nn.LayerNorm(opts.d_model)
        self.qkv = nn.Linear(opts.d_model, 3 * opts.d_model)
        self.proj = nn.Linear(opts.d_model, opts.d_model)
        self.mlp = nn.Sequential(nn.Linear(opts.d_model, 4 * opts.d_model), nn.GELU(), nn.Linear(4 * opts.d_model, opts.d_model))
        self.drop = nn.Dropout(opts.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        att = self.attention(q, k, v, is_causal=True, dropout_p=p).transpose(1, 2).reshape(b, s, d)
        x = x + self.drop(self.proj(att))
        return x + self.drop(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    def __init__(self, opts: CausalLMOptions, attention):
        super().__init__()
        self.tok = nn.Embedding(256, opts.d_model)
        self.pos = nn.Embedding(opts.seq_len, opts.d_model)
        self.blocks = nn.ModuleList(Block(opts, attention) for _ in range(opts.n_layers))
        self.ln = nn.LayerNorm(opts.d_model)
        self.head = nn.Linear(opts.d_model, 256, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.size(1), device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class CausalLM(Workload):
    Options = CausalLMOptions
    metrics = METRICS
    model_reads_hparams = False

    def __init__(self, options: CausalLMOptions):
        super().__init__(options)
        corpus = load_corpus(options.corpus_bytes)
        split = int(len(corpus) * (1 - options.val_fraction))
        self.train_data, self.val_data = corpus[:split], corpus[split:]

    def build_model(self, attention: str) -> nn.Module:
        return GPT(self.options, attention_function(attention))

    def checkpoint_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        return list(model.blocks)

    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]:
        generator = torch.Generator().manual_seed(seed)
        span = self.options.seq_len + 1
        while True:
            starts = torch.randint(0, len(self.train_data) - span, (batch_size,), generator=generator)
            yield {"tokens": torch.stack([self.train_data[s : s + span] for s in starts.tolist()])}

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        tokens = batch["tokens"]
        logits = model(tokens[:, :-1])
        return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())

    def eval_windows(self) -> torch.Tensor:
        """The validation windows (seq_len + 1 tokens each) that `evaluate` scores."""
        span = self.options.seq_len + 1
        windows = self.val_data[: (len(self.val_data) // span) * span].view(-1, span)
        return windows[: self.options.eval_batches * EVAL_BATCH_SIZE]

    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]:
        windows = self.eval_windows()
        chunks = windows.split(EVAL_BATCH_SIZE)
        total = sum(self.training_loss(model, move({"tokens": chunk})).item() * len(chunk) for chunk in chunks)
        loss = total / len(windows)
        return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 50.0))}
