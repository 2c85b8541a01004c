"""Direction classification on a real daily price series: a CNN-LSTM with optional self-attention.

Data: the daily Microsoft prices (1986-03-13 to 2017-11-10, 7983 days) that ship inside the
pmdarima wheel. The CSV is read straight from `pmdarima/datasets/data/msft.tar.gz`: importing
pmdarima costs about 4 s, reading the file under 0.1 s. Features per day: log return, log(high/low),
log(close/open) and the change in log(1 + volume), standardised with training-split statistics
and clipped to +-5 standard deviations. Label: the log return over the next `horizon` days, cut at
the terciles of the training labels into short (0) / flat (1) / long (2), so the training classes
are balanced; validation uses the same cut points, so its balance reflects the later market.

Split is chronological: the first (1 - val_fraction) of days are training days, and a training
window's label ends before that boundary; every validation window starts on or after it.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import tarfile
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hpo import deps
from hpo.errors import UserInputError
from hpo.knobs.attention_kernels import AttentionFn, attention_function
from hpo.workloads.base import Batch, MoveFn, Workload
from hpo.workloads.options.timeseries_classification import METRICS, TimeseriesOptions

CLASSES = ("short", "flat", "long")
EVAL_BATCH_SIZE = 256
_CLIP = 5.0


@functools.cache
def load_msft() -> tuple[np.ndarray, np.ndarray]:
    """(dates as 'YYYY-MM-DD' strings, float64 [open, high, low, close, volume]) per trading day."""
    path = deps.package_folder("workload.name: timeseries_classification", "pmdarima") / "datasets" / "data" / "msft.tar.gz"
    with tarfile.open(path) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith(".csv"))
        text = archive.extractfile(member).read().decode()
    dates = np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, usecols=0, dtype=str)
    values = np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, usecols=range(1, 6), dtype=np.float64)
    dates.flags.writeable = values.flags.writeable = False
    return dates, values


@dataclasses.dataclass(frozen=True)
class Series:
    """Standardised features per day, a label per window end, and the window ends of each split."""

    dates: np.ndarray  # (days,), the day each feature row describes
    features: torch.Tensor  # (days, 4) float32
    labels: torch.Tensor  # (days,) int64; -1 where the horizon runs past the data
    train_ends: torch.Tensor  # last day of each training window
    val_ends: torch.Tensor
    split_day: int  # first validation day


@functools.cache
def prepare(window: int, horizon: int, val_fraction: float) -> Series:
    """Features, tercile labels and the chronological split; shared by workloads with equal arguments."""
    dates, values = load_msft()
    open_, high, low, c, v = values.T
    feats = np.stack([np.diff(np.log(c)), np.log(high / low)[1:], np.log(c / open_)[1:], np.diff(np.log1p(v))], axis=1)
    close, dates, days = c[1:], dates[1:], len(c) - 1
    split = int(days * (1 - val_fraction))
    train_ends, val_ends = _window_ends(days, split, window, horizon, val_fraction)
    mean, std = feats[:split].mean(axis=0), feats[:split].std(axis=0)
    feats = np.clip((feats - mean) / std, -_CLIP, _CLIP)
    labels = _tercile_labels(close, horizon, train_ends)
    return Series(
        dates=dates,
        features=torch.from_numpy(feats).float(),
        labels=torch.from_numpy(labels).long(),
        train_ends=torch.from_numpy(train_ends),
        val_ends=torch.from_numpy(val_ends),
        split_day=split,
    )


def _window_ends(days: int, split: int, window: int, horizon: int, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """The last day of each training window, and of each validation window: a training window's
    label lies before the split, a validation window starts after it."""
    ends = np.arange(window - 1, days - horizon)
    train_ends, val_ends = ends[ends + horizon < split], ends[ends - window + 1 >= split]
    if len(train_ends) == 0 or len(val_ends) == 0:
        raise UserInputError(
            f"workload: window={window}, horizon={horizon}, val_fraction={val_fraction} leave "
            f"{len(train_ends)} training and {len(val_ends)} validation windows of {days} days; both must be > 0"
        )
    return train_ends, val_ends


def _tercile_labels(close: np.ndarray, horizon: int, train_ends: np.ndarray) -> np.ndarray:
    """Each day's class: the tercile of its forward log return over `horizon` days, cut at the
    training windows' terciles; -1 where the return runs past the data."""
    days = len(close)
    forward = np.full(days, np.nan)
    forward[: days - horizon] = np.log(close[horizon:] / close[:-horizon])
    cuts = np.quantile(forward[train_ends], [1 / 3, 2 / 3])
    return np.where(np.isnan(forward), -1, np.digitize(forward, cuts))


class ConvBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dropout: float):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding="same")
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, channels, time)
        return self.dropout(F.gelu(self.conv(x)))


class SelfAttention(nn.Module):
    """Pre-norm residual multi-head self-attention; the attention knob picks the kernel."""

    def __init__(self, dim: int, heads: int, dropout: float, attention_fn: AttentionFn):
        super().__init__()
        self.heads, self.dropout, self.attention_fn = heads, dropout, attention_fn
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, time, dim)
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = self.attention_fn(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return x + self.out(y.transpose(1, 2).reshape(b, t, d))


class CnnLstmClassifier(nn.Module):
    def __init__(self, features: int, options: TimeseriesOptions, attention_fn: AttentionFn):
        super().__init__()
        o, p = options, options.dropout
        self.conv = nn.Sequential(
            ConvBlock(features, o.conv_channels, o.kernel_size, p),
            ConvBlock(o.conv_channels, o.conv_channels, o.kernel_size, p),
        )
        self.lstm = nn.LSTM(
            o.conv_channels, o.lstm_hidden, o.lstm_layers, batch_first=True, dropout=p if o.lstm_layers > 1 else 0.0
        )
        self.attention = SelfAttention(o.lstm_hidden, o.attention_heads, p, attention_fn) if o.attention_heads else None
        self.norm = nn.LayerNorm(2 * o.lstm_hidden)
        self.head = nn.Linear(2 * o.lstm_hidden, len(CLASSES))
        self.dropout = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, window, features) -> (batch, 3)
        h, _ = self.lstm(self.conv(x.transpose(1, 2)).transpose(1, 2))
        if self.attention is not None:
            h = self.attention(h)
        pooled = torch.cat([h.mean(dim=1), h[:, -1]], dim=-1)  # the whole window and its latest day
        return self.head(self.dropout(self.norm(pooled)))


class TimeseriesClassification(Workload):
    """Short / flat / long direction of MSFT over `horizon` days from the previous `window` days.

    Batches: {"x": (batch, window, 4) float32, "labels": (batch,) int64}.
    """

    Options = TimeseriesOptions
    metrics = METRICS
    model_reads_hparams = False

    def __init__(self, options: TimeseriesOptions):
        super().__init__(options)
        self.data = prepare(options.window, options.horizon, options.val_fraction)

    def build_model(self, attention: str) -> nn.Module:
        attention_fn = attention_function(attention)
        with torch.random.fork_rng(devices=[]):  # seeded init that leaves the global RNG as it was
            torch.manual_seed(self.options.seed)
            return CnnLstmClassifier(self.data.features.shape[1], self.options, attention_fn)

    def checkpoint_blocks(self, model: nn.Module) -> list[nn.Module]:
        """Conv blocks, the LSTM and the attention layer. The LSTM is left out when it has dropout between
        layers: cuDNN draws that mask from its own state, so recomputation would not see the same mask."""
        lstm = [model.lstm] if model.lstm.num_layers == 1 or model.lstm.dropout == 0 else []
        return [*model.conv, *lstm, *([model.attention] if model.attention is not None else [])]

    def _batch(self, ends: torch.Tensor) -> Batch:
        days = ends[:, None] + torch.arange(1 - self.options.window, 1)
        return {"x": self.data.features[days], "labels": self.data.labels[ends]}

    def train_batches(self, batch_size: int, seed: int) -> Iterator[Batch]:
        """Infinite; reshuffled every epoch; the last incomplete batch of an epoch is dropped."""
        ends = self.data.train_ends
        if not 1 <= batch_size <= len(ends):
            raise UserInputError(f"batch_size: 1 <= batch_size <= {len(ends)} (training windows) must hold, but got {batch_size}")
        generator = torch.Generator().manual_seed(seed)
        while True:
            order = ends[torch.randperm(len(ends), generator=generator)]
            for start in range(0, len(ends) - batch_size + 1, batch_size):
                yield self._batch(order[start : start + batch_size])

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(model(batch["x"]).float(), batch["labels"])

    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]:
        loss_sum, correct, ends = 0.0, 0, self.data.val_ends
        for start in range(0, len(ends), EVAL_BATCH_SIZE):
            batch = move(self._batch(ends[start : start + EVAL_BATCH_SIZE]))
            logits = model(batch["x"]).float()
            loss_sum += F.cross_entropy(logits, batch["labels"], reduction="sum").item()
            correct += (logits.argmax(dim=-1) == batch["labels"]).sum().item()
        return {"val_accuracy": correct / len(ends), "val_loss": loss_sum / len(ends)}
