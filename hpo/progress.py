"""Progress lines on stderr: one per evaluation and one per finished trial, readable from many
workers at once (each line names its trial), unlike a redrawn bar."""

from __future__ import annotations

import sys
import time

import optuna


def _emit(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def eval_line(trial_number: int, step: int, max_steps: int, metrics: dict[str, float]) -> None:
    shown = " ".join(f"{k}={v:.4g}" for k, v in metrics.items())
    _emit(f"  trial {trial_number} step {step}/{max_steps} {shown}")


class TrialPrinter:
    """Optuna callback printing `trial N/TOTAL verdict values knobs throughput time`."""

    def __init__(self, total: int):
        self.total, self.start = total, time.perf_counter()

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        attrs = trial.user_attrs
        knobs = attrs.get("knobs_observed") or attrs.get("knobs_requested") or {}
        knob_text = " ".join(f"{k}={knobs[k]}" for k in ("precision", "attention", "optimizer", "grad_checkpointing", "compile") if k in knobs)
        values = "" if trial.values is None or attrs.get("verdict") != "ok" else " ".join(f"{v:.4g}" for v in trial.values)
        speed = attrs.get("train_samples_per_s")
        speed_text = f" {speed:.1f} samples/s" if isinstance(speed, float) else ""
        elapsed = time.perf_counter() - self.start
        _emit(
            f"trial #{trial.number} (budget {self.total}) {trial.state.name.lower()} [{attrs.get('verdict', trial.state.name.lower())}] "
            f"{values} {knob_text}{speed_text} ({elapsed:.0f} s elapsed)".replace("  ", " ")
        )
