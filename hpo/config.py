"""Frozen configs that the executor sees. Built by `hpo.space.suggest` from a trial, or loaded from
an exported YAML by `load_trial_config`; nothing else builds them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hpo import CONFIG_FORMAT, __version__
from hpo.errors import UserInputError
from hpo.knobs.values import ATTENTIONS, COMPILE_MODES, OPTIMIZER_IMPLS, PRECISIONS


@dataclass(frozen=True, kw_only=True)
class Knobs:
    """The five systems knobs of one trial. `compile` is False or an inductor mode name."""

    precision: str = "fp32"
    attention: str = "sdpa"
    optimizer: str = "fused"
    grad_checkpointing: bool = False
    compile: bool | str = False

    def __post_init__(self) -> None:
        _check_choice("systems.precision", self.precision, PRECISIONS)
        _check_choice("systems.attention", self.attention, ATTENTIONS)
        _check_choice("systems.optimizer", self.optimizer, OPTIMIZER_IMPLS)
        if not isinstance(self.grad_checkpointing, bool):
            raise UserInputError(
                f"systems.grad_checkpointing must be true or false, got {self.grad_checkpointing!r}"
            )
        if self.compile is not False:
            _check_choice("systems.compile", self.compile, (False,) + COMPILE_MODES)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """Hyperparameters the trainer itself consumes; every other param goes to the workload."""

    lr: float = 1e-3
    batch_size: int = 32
    weight_decay: float = 0.0
    warmup_steps: int = 0
    grad_clip: float = 1.0
    max_steps: int = 100
    eval_every: int = 50
    # The compile backend; tests use "eager"/"aot_eager" because inductor takes ~20 s on CPU.
    compile_backend: str = "inductor"

    def __post_init__(self) -> None:
        _check_positive("params.lr", self.lr)
        _check_positive("params.batch_size", self.batch_size)
        _check_positive("workload.max_steps", self.max_steps)
        _check_positive("workload.eval_every", self.eval_every)
        if self.weight_decay < 0:
            raise UserInputError(f"params.weight_decay must be >= 0, got {self.weight_decay}")


# Hyperparameters a search space may set for the trainer; every other param is a workload option.
TRAINING_KEYS = ("lr", "batch_size", "weight_decay", "warmup_steps", "grad_clip")


@dataclass(frozen=True, kw_only=True)
class TrialConfig:
    """A complete, runnable config: what `hpo export` writes and `hpo train` reads."""

    workload: str
    workload_options: dict[str, Any] = field(default_factory=dict)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    knobs: Knobs = field(default_factory=Knobs)
    seed: int = 0
    objectives: tuple[str, ...] = ("val_loss",)
    directions: tuple[str, ...] = ("minimize",)
    device: str = "auto"
    skip_slow: bool = True
    slow_ratio: float = 5.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": CONFIG_FORMAT,
            "hpo_version": __version__,
            "workload": {"name": self.workload, **self.workload_options},
            "training": dataclasses.asdict(self.training),
            "systems": self.knobs.as_dict(),
            "seed": self.seed,
            "objectives": list(self.objectives),
            "directions": list(self.directions),
            "device": self.device,
            "verification": {"skip_slow": self.skip_slow, "slow_ratio": self.slow_ratio},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> TrialConfig:
        fmt = data.get("format")
        if not isinstance(fmt, int) or fmt > CONFIG_FORMAT:
            raise UserInputError(
                f"{source}: config format {fmt!r} is not supported by hpo {__version__} "
                f"(reads format <= {CONFIG_FORMAT}); upgrade hpo or re-export the trial"
            )
        try:
            workload = dict(data["workload"])
            verification = data.get("verification", {})
            return cls(
                workload=workload.pop("name"),
                workload_options=workload,
                training=TrainingConfig(**data["training"]),
                knobs=Knobs(**data["systems"]),
                seed=int(data["seed"]),
                objectives=tuple(data["objectives"]),
                directions=tuple(data["directions"]),
                device=data.get("device", "auto"),
                skip_slow=bool(verification.get("skip_slow", True)),
                slow_ratio=float(verification.get("slow_ratio", 5.0)),
            )
        except (KeyError, TypeError) as exc:
            raise UserInputError(f"{source}: not a complete hpo config ({exc}); export one with `hpo export`") from None


def _check_choice(path: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        shown = ", ".join(str(a).lower() if isinstance(a, bool) else str(a) for a in allowed)
        raise UserInputError(f"{path} must be one of [{shown}], got {value!r}")


def _check_positive(path: str, value: float) -> None:
    if not value > 0:
        raise UserInputError(f"{path} must be > 0, got {value!r}")
