"""Toy workloads that report a metric, `val_f1`, whose name says nothing about which way is better,
loaded as users load theirs (`metric_workloads:F1Declared`)."""

from __future__ import annotations

from dataclasses import dataclass

from toy_workloads import Toy, ToyOptions


class F1Declared(Toy):
    """Declares every metric's direction: val_f1 is better higher."""

    metrics = {"val_f1": "maximize", "val_loss": "minimize"}

    def evaluate(self, model, move) -> dict[str, float]:
        metrics = super().evaluate(model, move)
        return {"val_f1": metrics["val_accuracy"], "val_loss": metrics["val_loss"]}


class F1Named(F1Declared):
    """The older tuple form: names its metrics, says no direction."""

    metrics = ("val_f1", "val_loss")


@dataclass(frozen=True, kw_only=True)
class FixedF1Options(ToyOptions):
    f1: float = 0.5
    report_f1: bool = True


class FixedF1(F1Declared):
    """Trains the toy, and evaluates to `val_f1 = f1` whatever it learned, so a target on val_f1 is
    reached or missed by choice; `report_f1: false` leaves val_f1 out of evaluate(), a workload bug."""

    Options = FixedF1Options

    def evaluate(self, model, move) -> dict[str, float]:
        metrics = {**super().evaluate(model, move), "val_f1": self.options.f1}
        return metrics if self.options.report_f1 else {"val_loss": metrics["val_loss"]}
