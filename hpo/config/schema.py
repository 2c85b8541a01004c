"""The search-space file's schema, which an exported config shares. Validation happens here, at the
boundary, with the user's key names."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from hpo.config.trial import ParallelSettings
from hpo.knobs.systems import KNOBS, LOADER_KNOBS, TRIAL_KNOBS
from hpo.knobs.systems.parallel import PARALLEL_KNOBS

SamplerName = Literal["tpe", "random", "nsga2", "cmaes", "gp"]
PrunerName = Literal["none", "median", "hyperband", "successive_halving"]
Direction = Literal["minimize", "maximize"]
# Where trials run: "auto" (the worker's GPU if there is one, else the CPU), or a torch device name.
DEVICE_PATTERN = r"^(auto|cpu|mps|cuda(:[0-9]+)?)$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SamplerSpec(_Strict):
    name: SamplerName = "tpe"
    seed: int | None = 0
    n_startup_trials: int | None = Field(default=None, ge=0)


class PrunerSpec(_Strict):
    name: PrunerName = "median"
    n_warmup_steps: int | None = Field(default=None, ge=0)


class StudySpec(_Strict):
    name: str = Field(default="hpo-study", min_length=1, max_length=200)
    objectives: list[str] = Field(default_factory=lambda: ["val_loss"], min_length=1)
    directions: list[Direction] = Field(default_factory=lambda: ["minimize"], min_length=1)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec = Field(default_factory=PrunerSpec)
    n_trials: int = Field(default=20, ge=1)
    timeout: float | None = Field(default=None, gt=0)
    seed: int = 0
    # A knob combination that works but runs this many times slower than fp32/eager is skipped.
    skip_slow: bool = True
    slow_ratio: float = Field(default=5.0, gt=1)
    max_retries: int = Field(default=2, ge=0)
    # Seconds a trial may run (from its start to its end) before its worker ends its process; the
    # trial then ends FAIL with a `timeout: ...` verdict and is retried under max_retries. With
    # `--in-process` only a hang in Python code can be ended, not one inside C code (hpo.runtime._trial_timeout).
    trial_timeout_s: float | None = Field(default=None, gt=0)
    # A trial predicted to need more memory than this is rejected before it trains (`oom: predicted
    # ...`), and `params.batch_size: auto` fills it. Default: on CUDA the device's total less a
    # margin (hpo.hardware._memory_model); on a CPU none, and when set hpo's own meter enforces it,
    # under a hard cap on the trial's process (hpo.hardware.memory_cap, docs/memory.md).
    memory_limit_gb: float | None = Field(default=None, gt=0)
    # joint: the sampler searches the hyperparameters and the knobs together. probe_first: the study
    # starts with `hpo probe`'s sweep; the knobs that do not change the arithmetic are fixed to the
    # fastest verified combination, and the sampler searches the hyperparameters plus the precision
    # among the `keep_fastest` fastest verified combinations of each precision (hpo.strategy).
    strategy: Literal["joint", "probe_first"] = "joint"
    keep_fastest: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _one_direction_per_objective(self) -> StudySpec:
        if len(self.objectives) != len(self.directions):
            raise ValueError(
                f"needs one direction per objective, got {len(self.objectives)} objectives "
                f"{self.objectives} and {len(self.directions)} directions {self.directions}"
            )
        return self


class WorkloadSpec(BaseModel):
    # Workload-specific options are extra keys; the workload's own options dataclass checks them.
    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = Field(min_length=1)
    max_steps: int = Field(default=100, ge=1)
    eval_every: int = Field(default=50, ge=1)
    # Steps between check boundaries: the loss is read from the device, and a NaN or inf loss caught,
    # every check_every steps and at every evaluation, never on the steps between.
    check_every: int = Field(default=50, ge=1)
    # Seconds of training (see README: what counts) after which a trial stops, max_steps permitting.
    budget_s: float | None = Field(default=None, gt=0)
    # With a budget, trials evaluate at the same training-time marks (default budget_s / 4), so the
    # pruner compares them at equal training time.
    eval_every_s: float | None = Field(default=None, gt=0)
    # Stop once an evaluation reaches it: {metric: value}, e.g. {val_loss: 2.0}.
    target: dict[str, float] | None = None

    @field_validator("target")
    @classmethod
    def _one_target(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is not None and len(value) != 1:
            raise ValueError(f"a target names one metric and its value, e.g. {{val_loss: 2.0}}, got {value}")
        return value

    @model_validator(mode="after")
    def _marks_need_a_budget(self) -> WorkloadSpec:
        if self.eval_every_s is not None and self.budget_s is None:
            raise ValueError("eval_every_s sets evaluation marks within a time budget: set budget_s too, or use eval_every")
        return self


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


class _Searched(_Strict):
    """A section whose keys are a scalar (fixed) or a non-empty list (searched)."""

    @field_validator("*", mode="after")
    @classmethod
    def _non_empty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("a searched knob needs at least one value")
        return value


def _with_knobs(name: str, base: type, doc: str, knobs: dict[str, Any]) -> Any:
    """`base` with one field per knob of `knobs`: a scalar (fixed) or a non-empty list (searched) of
    the knob's values, at its default, described by its help."""
    fields = {
        n: (list[k.value_schema()] | k.value_schema(), Field(default=k.default, description=k.help)) for n, k in knobs.items()
    }
    return create_model(name, __base__=base, __doc__=doc, __module__=__name__, **fields)


_PARALLEL = ParallelSettings()


class _RanksSettings(_Searched):
    """`systems.parallel`'s keys that say how the ranks run; its knobs are added from their modules below."""

    processes: int = Field(default=_PARALLEL.processes, ge=1, le=1024)
    backend: Literal["auto", "gloo", "nccl"] = _PARALLEL.backend
    collective_timeout_s: float = Field(default=_PARALLEL.collective_timeout_s, gt=0)
    port: int | None = Field(default=_PARALLEL.port, ge=1, le=65535)

    def choices(self) -> dict[str, list]:
        """Every key as its list of values (one when fixed)."""
        return {name: _as_list(getattr(self, name)) for name in type(self).model_fields}


# `systems.parallel`: each trial runs as `processes` ranks of one torch.distributed group
# (`hpo.parallel`); its knobs (hpo.knobs.systems.parallel) are a scalar (fixed) or a list (searched).
ParallelSpec = _with_knobs(
    "ParallelSpec",
    _RanksSettings,
    "`systems.parallel`: each trial runs as `processes` ranks of one torch.distributed group.",
    PARALLEL_KNOBS,
)


class _SystemsSettings(_Searched):
    """The `systems` keys that are not knobs; the knobs' keys are added from their modules below."""

    # Not searched: inductor in real studies; tests and quick looks use the cheap "eager"/"aot_eager".
    compile_backend: Literal["inductor", "aot_eager", "eager"] = "inductor"
    # Where trials run; not searched. "auto": the worker's GPU if there is one, else the CPU.
    device: str = Field(default="auto", pattern=DEVICE_PATTERN)
    # Several processes per trial (DDP or FSDP2); absent: one process.
    parallel: ParallelSpec | None = None

    @field_validator(*KNOBS, mode="before", check_fields=False)
    @classmethod
    def _normalized(cls, value: Any, info: Any) -> Any:
        """A knob's other spellings (precision's aliases) read as its own value."""
        fix = KNOBS[info.field_name].normalized
        return [fix(v) for v in value] if isinstance(value, list) else fix(value)

    def choices(self) -> dict[str, list]:
        """Each knob of a trial's `Knobs`, as its list of values (one when fixed)."""
        return {name: _as_list(getattr(self, name)) for name in TRIAL_KNOBS}

    def loader_choices(self) -> dict[str, list]:
        """The input-pipeline settings, each as its list of values (one when fixed)."""
        return {name: _as_list(getattr(self, name)) for name in LOADER_KNOBS}


# Each knob is a scalar (fixed) or a non-empty list (searched), declared by its module (hpo.knobs.systems).
SystemsSpec = _with_knobs("SystemsSpec", _SystemsSettings, "Each knob is a scalar (fixed) or a list (searched).", KNOBS)


class SpaceFile(_Strict):
    """A search-space file; an exported config is one with every value fixed (and `format` set)."""

    # Set by `hpo export`; a hand-written file may leave both out. space.py reads older formats.
    format: Literal[2] | None = None
    hpo_version: str | None = None
    study: StudySpec = Field(default_factory=StudySpec)
    workload: WorkloadSpec
    params: dict[str, Any] = Field(default_factory=dict)
    systems: SystemsSpec = Field(default_factory=SystemsSpec)
