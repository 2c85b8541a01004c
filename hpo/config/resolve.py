"""A validated search space plus one value per searched key -> the frozen TrialConfig the executor
sees. `hpo.study._suggest` supplies a trial's values; `hpo train` needs a file with every value fixed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hpo.config.objectives import metric_direction, study_directions
from hpo.config.params import AutoBatch, Choices, Fixed, IntRange, ParamSpec, describe
from hpo.config.space import SearchSpace, load_space
from hpo.config.trial import TRAINING_KEYS, Knobs, LoaderSettings, ParallelSettings, Target, TrainingConfig, TrialConfig
from hpo.errors import UserInputError
from hpo.workloads.catalog import metrics_of

__all__ = [
    "build_config",
    "first_loader",
    "first_parallel",
    "fixed_config",
    "load_config",
    "representative_config",
    "representative_values",
    "searched_keys",
]


def build_config(
    space: SearchSpace,
    values: dict[str, Any],
    knobs: Knobs,
    loader: LoaderSettings | None = None,
    parallel: ParallelSettings | None = None,
) -> TrialConfig:
    """The config of one trial: `values` holds a value for every param of the space; `loader` and
    `parallel` (None: each setting's first value in the space) the input pipeline and the ranks."""
    spec = space.spec
    parallel = parallel if parallel is not None else first_parallel(space)
    auto, values = _auto_batch(values, parallel.processes if parallel is not None else 1)
    return TrialConfig(
        workload=spec.workload.name,
        workload_options={**space.workload_options(), **{k: v for k, v in values.items() if k not in TRAINING_KEYS}},
        training=_training(spec, values),
        knobs=knobs,
        loader=loader if loader is not None else first_loader(space),
        seed=spec.study.seed,
        objectives=tuple(spec.study.objectives),
        directions=tuple(spec.study.directions),
        device=spec.systems.device,
        skip_slow=spec.study.skip_slow,
        slow_ratio=spec.study.slow_ratio,
        memory_limit_gb=spec.study.memory_limit_gb,
        batch_auto=auto,
        parallel=parallel,
    )


def _auto_batch(values: dict[str, Any], processes: int) -> tuple[AutoBatch | None, dict[str, Any]]:
    """`batch_size: auto` apart, if given, and the values with the smallest batch it may choose as
    the batch until the trial chooses one: `multiple_of`, or over ranks the smallest global batch
    that is a multiple of it and splits over them (their least common multiple)."""
    auto = values.get("batch_size") if isinstance(values.get("batch_size"), AutoBatch) else None
    return auto, values if auto is None else {**values, "batch_size": math.lcm(auto.multiple_of, processes)}


def _training(spec, values: dict[str, Any]) -> TrainingConfig:
    """The training loop's settings: the workload's steps and budget, and the training params' values."""
    return TrainingConfig(
        max_steps=spec.workload.max_steps,
        eval_every=spec.workload.eval_every,
        check_every=spec.workload.check_every,
        budget_s=spec.workload.budget_s,
        eval_every_s=spec.workload.eval_every_s,
        target=_target(spec),
        compile_backend=spec.systems.compile_backend,
        **{k: v for k, v in values.items() if k in TRAINING_KEYS},
    )


def _target(spec) -> Target | None:
    if spec.workload.target is None:
        return None
    metric, value = next(iter(spec.workload.target.items()))
    given = study_directions(spec.study.objectives, spec.study.directions)
    direction = metric_direction(metric, metrics_of(spec.workload.name), given)
    if direction is None:  # parse_space refuses this; a config built by hand must not guess either
        raise UserInputError(f"workload.target: workload {spec.workload.name!r} declares no direction for {metric!r}")
    return Target(metric, float(value), direction)


def searched_keys(space: SearchSpace) -> dict[str, Any]:
    """Key path -> what the file searches there, for every param and knob that is not fixed."""
    params = {f"params.{k}": spec for k, spec in space.params.items() if not isinstance(spec, (Fixed, AutoBatch))}
    knobs = {f"systems.{k}": choices for k, choices in {**space.systems, **space.loader}.items() if len(choices) > 1}
    ranks = {f"systems.parallel.{k}": choices for k, choices in space.parallel.items() if len(choices) > 1}
    return {**params, **knobs, **ranks}


def first_loader(space: SearchSpace) -> LoaderSettings:
    """Each loader setting's first value in the space."""
    return LoaderSettings(**{k: v[0] for k, v in space.loader.items()})


def first_parallel(space: SearchSpace) -> ParallelSettings | None:
    """Each `systems.parallel` key's first value in the space; None when the space runs one process."""
    if not space.parallel:
        return None
    return ParallelSettings(**{k: v[0] for k, v in space.parallel.items()})


def _middle(spec: ParamSpec):
    if isinstance(spec, Fixed):
        return spec.value
    if isinstance(spec, AutoBatch):  # chosen by the trial (`hpo.trial._memory_limit`)
        return spec
    if isinstance(spec, Choices):
        return spec.choices[0]
    middle = math.sqrt(spec.low * spec.high) if spec.log else (spec.low + spec.high) / 2
    if spec.step:
        middle = spec.low + round((middle - spec.low) / spec.step) * spec.step
    return int(round(middle)) if isinstance(spec, IntRange) else float(middle)


def representative_values(space: SearchSpace) -> dict[str, Any]:
    """One documented value per param, where a single config must stand for the space (`hpo probe`,
    the worker's warm-up): a fixed value as it is, the middle of a range (the geometric middle of
    a log range, rounded for integers and steps), the first of a list of choices."""
    return {name: _middle(spec) for name, spec in space.params.items()}


def representative_config(space: SearchSpace) -> TrialConfig:
    """The representative values with the first value of each knob."""
    return build_config(space, representative_values(space), Knobs(**{k: v[0] for k, v in space.systems.items()}))


def fixed_config(space: SearchSpace) -> TrialConfig:
    """The one config of a file whose every value is fixed (an export, or an edited one)."""
    searched = searched_keys(space)
    if searched:
        path, what = next(iter(searched.items()))
        raise UserInputError(
            f"{space.source}: {path}: a config to train or enqueue holds one value per key, "
            f"got {describe(what)}; write one value (or search it with `hpo run`)"
        )
    values = {name: spec.value if isinstance(spec, Fixed) else spec for name, spec in space.params.items()}
    return build_config(space, values, Knobs(**{name: choices[0] for name, choices in space.systems.items()}))


def load_config(path: str | Path) -> TrialConfig:
    """Read, validate and resolve a config file for `hpo train`."""
    return fixed_config(load_space(path))
