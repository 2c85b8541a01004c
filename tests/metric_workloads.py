"""Toy workloads that report a metric, `val_f1`, whose name says nothing about which way is better,
loaded as users load theirs (`metric_workloads:F1Declared`)."""

from __future__ import annotations

from toy_workloads import Toy


class F1Declared(Toy):
    """Declares every metric's direction: val_f1 is better higher."""

    metrics = {"val_f1": "maximize", "val_loss": "minimize"}

    def evaluate(self, model, move) -> dict[str, float]:
        metrics = super().evaluate(model, move)
        return {"val_f1": metrics["val_accuracy"], "val_loss": metrics["val_loss"]}


class F1Named(F1Declared):
    """The older tuple form: names its metrics, says no direction."""

    metrics = ("val_f1", "val_loss")
