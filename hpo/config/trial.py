"""Frozen configs that the executor sees. Built only from a validated search space, by
`hpo.config.resolve` (for `hpo train`, or a trial's values from `hpo.study._suggest`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hpo import CONFIG_FORMAT, __version__
from hpo.config import lr_scaling
from hpo.config.params import TRAINING_RULES, AutoBatch
from hpo.knobs.systems import LOADER_KNOBS, TRIAL_KNOBS
from hpo.knobs.systems.parallel import PARALLEL_KNOBS

__all__ = [
    "TRAINING_KEYS",
    "Knobs",
    "LoaderSettings",
    "ParallelSettings",
    "Target",
    "TrainingConfig",
    "TrialConfig",
]

# Hyperparameters a search space may set for the trainer; every other param is a workload option.
TRAINING_KEYS = tuple(TRAINING_RULES)
# Written into an export only when they differ, so an export's `systems` holds just the five knobs.
_DEFAULT_COMPILE_BACKEND = "inductor"
_DEFAULT_DEVICE = "auto"


def _as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def _changed(self) -> dict[str, Any]:
    """The settings that differ from the defaults: what an export writes, so an old one reads the same."""
    return {k: v for k, v in self.as_dict().items() if v != LOADER_KNOBS[k].default}


def _settings(name: str, knobs: dict, doc: str, *, leading: tuple = (), **methods: Any) -> type:
    """A frozen dataclass with the `leading` fields, then one per knob of `knobs` at the knob's
    default (hpo.knobs.systems)."""
    fields = [*leading, *((k.name, k.value_type, field(default=k.default)) for k in knobs.values())]
    namespace = {"__doc__": doc, "__module__": __name__, "as_dict": _as_dict, **methods}
    return dataclasses.make_dataclass(name, fields, frozen=True, kw_only=True, namespace=namespace)


Knobs = _settings(
    "Knobs",
    TRIAL_KNOBS,
    "The systems knobs of one trial, one field per knob module (`hpo.knobs.systems`). `compile` is False or an inductor mode name.",
)
LoaderSettings = _settings(
    "LoaderSettings",
    LOADER_KNOBS,
    "The input pipeline of one trial (`systems.loader`, `num_workers`, ...; `hpo.engine._loader`). Apart from "
    "`Knobs`: the probe's model comparison never sees them, the loader check does.",
    changed=_changed,
)


ParallelSettings = _settings(
    "ParallelSettings",
    PARALLEL_KNOBS,
    "A trial run as `processes` ranks of one torch.distributed group (`systems.parallel`, `hpo.parallel`); its "
    "knobs, one module each in `hpo.knobs.systems.parallel`, are searched like the other knobs, and each applies "
    "to one strategy (the other's is recorded but has no effect).",
    leading=(
        ("processes", int, field(default=1)),
        # "auto": NCCL on CUDA, gloo on a CPU
        ("backend", str, field(default="auto")),
        # Seconds any one collective may wait for its peers before the group raises: a rank that hangs
        # ends the trial `timeout: ...` instead of holding the others forever.
        ("collective_timeout_s", float, field(default=300.0)),
        # The rendezvous store's port; None: one the OS picks free.
        ("port", int | None, field(default=None)),
    ),
)


@dataclass(frozen=True)
class Target:
    """Stop training when an evaluation of `metric` reaches `value` in `direction`."""

    metric: str
    value: float
    direction: str = "minimize"

    def reached(self, metrics: dict[str, float]) -> bool:
        got = metrics[self.metric]
        return got <= self.value if self.direction == "minimize" else got >= self.value


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
    # Steps between check boundaries, where the loss is read and non-finite values are caught (see
    # hpo.trial._trainer): a NaN is found at most this many steps after it appears.
    check_every: int = 50
    # The compile backend; tests use "eager"/"aot_eager" because inductor takes ~20 s on CPU.
    compile_backend: str = _DEFAULT_COMPILE_BACKEND
    budget_s: float | None = None
    eval_every_s: float | None = None
    target: Target | None = None

    @property
    def eval_marks_s(self) -> float | None:
        """Seconds of training between evaluations in a time-budget trial; None: every eval_every steps."""
        if self.budget_s is None:
            return None
        return self.eval_every_s or self.budget_s / 4

    def params(self) -> dict[str, Any]:
        """The values a search space sets under `params:`."""
        return {key: getattr(self, key) for key in TRAINING_KEYS}


@dataclass(frozen=True, kw_only=True)
class TrialConfig:
    """A complete, runnable config: what `hpo export` writes and `hpo train` reads."""

    workload: str
    workload_options: dict[str, Any] = field(default_factory=dict)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    knobs: Knobs = field(default_factory=Knobs)
    loader: LoaderSettings = field(default_factory=LoaderSettings)
    seed: int = 0
    objectives: tuple[str, ...] = ("val_loss",)
    directions: tuple[str, ...] = ("minimize",)
    device: str = _DEFAULT_DEVICE
    skip_slow: bool = True
    slow_ratio: float = 5.0
    memory_limit_gb: float | None = None
    # `batch_size: auto`: the executor picks the batch and trains a copy with it and this unset;
    # until then `training.batch_size` is `multiple_of`, the batch the probe runs at.
    batch_auto: AutoBatch | None = None
    # Several processes per trial (`systems.parallel`); None: the trial is one process.
    parallel: ParallelSettings | None = None

    def to_dict(self) -> dict[str, Any]:
        """A search-space file with every value fixed: `hpo validate`, `run` and `train` read it."""
        training = self.training
        study = {"objectives": list(self.objectives), "directions": list(self.directions), "seed": self.seed}
        return {
            "format": CONFIG_FORMAT,
            "hpo_version": __version__,
            "study": {**study, "skip_slow": self.skip_slow, "slow_ratio": self.slow_ratio, **self._memory_limit()},
            "workload": {
                "name": self.workload,
                "max_steps": training.max_steps,
                "eval_every": training.eval_every,
                **_budget(training),
                **self.workload_options,
            },
            "params": {**training.params(), **self._auto_params()},
            "systems": self._systems(),
        }

    def _systems(self) -> dict[str, Any]:
        """The file's `systems`: the knobs, and each other setting that differs from its default."""
        systems: dict[str, Any] = self.knobs.as_dict()
        if self.training.compile_backend != _DEFAULT_COMPILE_BACKEND:
            systems["compile_backend"] = self.training.compile_backend
        if self.device != _DEFAULT_DEVICE:
            systems["device"] = self.device
        systems.update(self.loader.changed())
        if self.parallel is not None:
            systems["parallel"] = self.parallel.as_dict()
        return systems

    def _auto_params(self) -> dict[str, Any]:
        if self.batch_auto is None:
            return {}
        return {"batch_size": self.batch_auto.record(), **lr_scaling.record(self.batch_auto)}

    def _memory_limit(self) -> dict[str, Any]:
        return {} if self.memory_limit_gb is None else {"memory_limit_gb": self.memory_limit_gb}


def _budget(training: TrainingConfig) -> dict[str, Any]:
    """The keys of a file written only when set: the time budget, the target, a check interval
    other than the default."""
    keys: dict[str, Any] = {}
    if training.budget_s is not None:
        keys["budget_s"] = training.budget_s
    if training.eval_every_s is not None:
        keys["eval_every_s"] = training.eval_every_s
    if training.check_every != TrainingConfig.check_every:
        keys["check_every"] = training.check_every
    if training.target is not None:
        keys["target"] = {training.target.metric: training.target.value}
    return keys
