"""Options and metrics of the built-in `timeseries_classification` workload (model:
hpo.workloads.timeseries_classification)."""

from __future__ import annotations

import dataclasses

from hpo.workloads.options import WorkloadOptions

__all__ = ["METRICS", "EXTRA", "PACKAGES", "Options", "TimeseriesOptions"]

METRICS = {"val_accuracy": "maximize", "val_loss": "minimize"}
# Installed by an extra, not with hpo (hpo.deps.EXTRA_PACKAGES): the daily prices ship inside the pmdarima wheel.
PACKAGES = ("pmdarima",)
EXTRA = "timeseries"  # the extra of hpo that installs them: `pip install 'hpo[timeseries]'`

_INTEGER_MINIMA = {
    "window": 2,
    "horizon": 1,
    "conv_channels": 1,
    "kernel_size": 1,
    "lstm_hidden": 1,
    "lstm_layers": 1,
    "attention_heads": 0,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimeseriesOptions(WorkloadOptions):
    window: int = 64
    horizon: int = 5
    conv_channels: int = 64
    kernel_size: int = 5
    lstm_hidden: int = 64
    lstm_layers: int = 1
    attention_heads: int = 4  # 0: no self-attention layer
    dropout: float = 0.1
    val_fraction: float = 0.2

    def __post_init__(self) -> None:
        for name, low in _INTEGER_MINIMA.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}: must be an integer >= {low}, but got {value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: 0 <= dropout < 1 must hold, but got {self.dropout!r}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction: 0 < val_fraction < 1 must hold, but got {self.val_fraction!r}")
        if self.attention_heads and self.lstm_hidden % self.attention_heads:
            raise ValueError(
                f"attention_heads: must divide lstm_hidden, "
                f"but got lstm_hidden={self.lstm_hidden}, attention_heads={self.attention_heads}"
            )


Options = TimeseriesOptions
