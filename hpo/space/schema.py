"""The search-space file's schema. Validation happens here, at the boundary, with the user's key names."""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hpo.knobs.values import KNOB_NAMES, PRECISION_ALIASES, Attention, CompileMode, OptimizerImpl, Precision

SamplerName = Literal["tpe", "random", "nsga2", "cmaes", "gp"]
PrunerName = Literal["none", "median", "hyperband", "successive_halving"]
Direction = Literal["minimize", "maximize"]


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


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


class SystemsSpec(_Strict):
    """Each knob is a scalar (fixed) or a list (searched)."""

    precision: Union[list[Precision], Precision] = "fp32"
    attention: Union[list[Attention], Attention] = "sdpa"
    optimizer: Union[list[OptimizerImpl], OptimizerImpl] = "fused"
    grad_checkpointing: Union[list[bool], bool] = False
    compile: Union[list[Union[Literal[False], CompileMode]], Literal[False], CompileMode] = False
    # Not searched: inductor in real studies; tests and quick looks use the cheap "eager"/"aot_eager".
    compile_backend: Literal["inductor", "aot_eager", "eager"] = "inductor"

    @field_validator("precision", mode="before")
    @classmethod
    def _alias(cls, value: Any) -> Any:
        fix = lambda v: PRECISION_ALIASES.get(v, v) if isinstance(v, str) else v  # noqa: E731
        return [fix(v) for v in value] if isinstance(value, list) else fix(value)

    @field_validator("*", mode="after")
    @classmethod
    def _non_empty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("a searched knob needs at least one value")
        return value

    def choices(self) -> dict[str, list]:
        return {name: _as_list(getattr(self, name)) for name in KNOB_NAMES}


class SpaceFile(_Strict):
    study: StudySpec = Field(default_factory=StudySpec)
    workload: WorkloadSpec
    params: dict[str, Any] = Field(default_factory=dict)
    systems: SystemsSpec = Field(default_factory=SystemsSpec)
