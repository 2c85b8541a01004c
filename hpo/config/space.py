"""Read and validate a search-space file into a `SearchSpace`. An exported config is a search-space
file with every value fixed (format 2), and an export of hpo 0.1 (format 1) is read as one. Every
problem becomes a UserInputError naming the file, the key path, the rule and the value."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic

from hpo import CONFIG_FORMAT, __version__
from hpo.config import legacy
from hpo.config.lr_scaling import attach_lr_scaling
from hpo.config.objectives import SYSTEM_METRICS, metric_direction, study_directions
from hpo.config.parallel_checks import check_parallel
from hpo.config.params import ParamSpec, candidates, check_training_param, parse_auto_batch, parse_param
from hpo.config.reading import first_error, read_yaml
from hpo.config.schema import SpaceFile
from hpo.config.trial import TRAINING_KEYS, LoaderSettings
from hpo.errors import UserInputError
from hpo.workloads.catalog import metrics_of, options_class, parse_options
from hpo.workloads.options import build_options, check_field

__all__ = ["SearchSpace", "load_space", "parse_space"]


@dataclass(frozen=True)
class SearchSpace:
    source: str
    raw: dict  # in the current format: what a study stores for its workers
    spec: SpaceFile
    params: dict[str, ParamSpec]
    systems: dict[str, list]
    loader: dict[str, list] = field(default_factory=dict)  # the input-pipeline settings' values
    parallel: dict[str, list] = field(default_factory=dict)  # `systems.parallel`'s values; empty: one process

    @property
    def checked_systems(self) -> dict[str, list]:
        """The knobs plus the loader backend: the values checked on a machine before the first trial."""
        return {**self.systems, **({"loader": self.loader["loader"]} if "loader" in self.loader else {})}

    def loader_changed(self) -> dict[str, list]:
        """The loader settings a file sets to other values than the defaults (a study's fingerprint
        holds only these, so a study begun before they existed resumes)."""
        return {k: v for k, v in self.loader.items() if v != [LoaderSettings().as_dict()[k]]}

    def _parallel_keys(self) -> dict[str, list]:
        return {f"parallel.{k}": v for k, v in self.parallel.items()}

    @property
    def study(self):
        return self.spec.study

    def workload_options(self) -> dict[str, Any]:
        """The workload's own options from the file (its name and training lengths removed)."""
        return dict(self.spec.workload.model_extra or {})

    def option_values(self, key: str) -> list[Any]:
        """Every value the workload option `key` takes in this space: each searched one, or the fixed one."""
        if key in self.params:
            return [value for _, value in candidates(key, self.params[key])]
        options = self.workload_options()
        return [options[key]] if key in options else []

    def fingerprint(self) -> dict[str, Any]:
        """What makes two files the same study: a resumed study must not change its space."""
        return {
            "workload": self.spec.workload.model_dump(),
            "params": {k: repr(v) for k, v in sorted(self.params.items())},
            "systems": {**self.systems, **self.loader_changed(), **self._parallel_keys()},
            "compile_backend": self.spec.systems.compile_backend,
            "objectives": self.study.objectives,
            "directions": self.study.directions,
        }


def load_space(path: str | Path) -> SearchSpace:
    return parse_space(read_yaml(Path(path)), source=str(path))


def parse_space(raw: dict, source: str) -> SearchSpace:
    """Validate an already-read space (from a file, or stored in a study for its workers)."""
    raw, where, spec = _validated_file(raw, source)
    try:
        params = {name: _parse_param(name, value, where) for name, value in spec.params.items()}
        params = attach_lr_scaling(params, where("params"))
        _check_workload(spec, params, where)
        check_parallel(spec, params, where)
    except UserInputError as exc:
        raise UserInputError(f"{source}: {exc}") from None
    return SearchSpace(
        source=source,
        raw=raw,
        spec=spec,
        params=params,
        systems=spec.systems.choices(),
        loader=spec.systems.loader_choices(),
        parallel=spec.systems.parallel.choices() if spec.systems.parallel is not None else {},
    )


def _validated_file(raw: dict, source: str) -> tuple[dict, Callable[[str], str], SpaceFile]:
    """The dict in today's format, how to spell a key path in the user's file, and the schema's
    reading of it; an error names `source` and the key path as the user wrote it."""
    try:
        raw, where = _current_format(raw)
        return raw, where, SpaceFile.model_validate(raw)
    except pydantic.ValidationError as exc:
        raise UserInputError(f"{source}: {first_error(exc, where)}") from None
    except UserInputError as exc:
        raise UserInputError(f"{source}: {exc}") from None


def _current_format(raw: dict) -> tuple[dict, Callable[[str], str]]:
    """The dict in today's format, and how to spell a key path of it in the user's own file."""
    fmt = raw.get("format")
    if fmt is None or (type(fmt) is int and fmt == CONFIG_FORMAT):
        return raw, str
    if type(fmt) is int and fmt == legacy.FORMAT_1:
        return legacy.upgrade(raw)
    raise UserInputError(
        f"format: config format {fmt!r} is not supported by hpo {__version__} "
        f"(reads formats 1 to {CONFIG_FORMAT}); upgrade hpo or re-export the trial"
    )


def _parse_param(name: str, raw: Any, where: Callable[[str], str]) -> ParamSpec:
    path = where(f"params.{name}")
    auto = parse_auto_batch(path, raw) if name == "batch_size" else None
    if auto is not None:
        return auto
    spec = parse_param(path, raw)
    check_training_param(path, name, spec)
    return spec


def _check_workload(spec: SpaceFile, params: dict[str, ParamSpec], where: Callable[[str], str]) -> None:
    name = spec.workload.name
    _check_workload_options(name, dict(spec.workload.model_extra or {}), params, where)
    known = metrics_of(name)
    unknown = [m for m in spec.study.objectives if known and m not in known and m not in SYSTEM_METRICS]
    if unknown:
        raise UserInputError(
            f"{where('study.objectives')}: workload {name!r} reports {list(known)} and every trial "
            f"{list(SYSTEM_METRICS)}, got {unknown}"
        )
    target = spec.workload.target or {}
    if known and any(m not in known for m in target):
        raise UserInputError(f"{where('workload.target')}: workload {name!r} reports {list(known)}, got {list(target)}")
    _check_directions(spec, known, where)
    if "time_to_target_s" in spec.study.objectives and not target:
        raise UserInputError(
            f"{where('study.objectives')}: time_to_target_s needs workload.target, e.g. target: {{val_loss: 2.0}}"
        )
    _check_steady_steps(spec, where)


def _check_workload_options(
    name: str, options: dict[str, Any], params: dict[str, ParamSpec], where: Callable[[str], str]
) -> None:
    """Every value a searched (or fixed) workload option can take is of the option's type, named by
    its own key path under params; the workload's own checks then run with each one in turn, beside
    the first value of every other param."""
    options_cls = options_class(name)
    searched = {key: candidates(where(f"params.{key}"), spec) for key, spec in params.items() if key not in TRAINING_KEYS}
    for key, values in searched.items():
        for path, value in values:
            check_field(options_cls, key, value, path)
    firsts = {key: values[0][1] for key, values in searched.items()}
    parse_options(name, {**options, **firsts})
    for key, values in searched.items():
        for path, value in values[1:]:
            build_options(options_cls, {**options, **firsts, key: value}, path)


# Objectives read from the steady training steps: those after the first (profiled) step, and after
# the second when compiling (the first compiles): `hpo.trial._trainer.evidence_step_index`.
STEADY_STEP_OBJECTIVES = ("step_time_ms", "mfu")
# Read from every training step but the profiled one (train_s): the compiling step trains and counts.
TRAINED_STEP_OBJECTIVES = ("train_samples_per_s",)


def _check_steady_steps(spec: SpaceFile, where: Callable[[str], str]) -> None:
    """A speed objective needs at least one step to time: without one every trial's value would be the worst."""
    compiles = any(spec.systems.choices()["compile"])
    steady_from = 3 if compiles else 2
    after = "after the compiling and the profiled step" if compiles else "after the profiled step"
    for objective in spec.study.objectives:
        if objective in STEADY_STEP_OBJECTIVES:
            needed, timed = steady_from, f"on steady steps, which start at step {steady_from} ({after})"
        elif objective in TRAINED_STEP_OBJECTIVES:
            needed, timed = 2, "on the training steps besides the profiled one, so on 2 steps at least"
        else:
            continue
        if spec.workload.max_steps < needed:
            raise UserInputError(
                f"{where('workload.max_steps')}: objective {objective} is timed {timed}, "
                f"got max_steps {spec.workload.max_steps}; set max_steps >= {needed}"
            )


def _check_directions(spec: SpaceFile, known: dict[str, str | None], where: Callable[[str], str]) -> None:
    """An objective's study direction agrees with the metric's declared one (an undeclared metric
    takes the study's), and a target's metric has a direction: declared, or given by the study."""
    study, name = spec.study, spec.workload.name
    for i, (metric, given) in enumerate(zip(study.objectives, study.directions, strict=True)):
        declared = metric_direction(metric, known)
        if declared is not None and given != declared:
            # Refused, not warned: the target, the progress line's "best" and the pruner would
            # read one way as better while the study optimized the other.
            raise UserInputError(
                f"{where(f'study.directions.{i}')}: {metric!r} is declared {declared} "
                f"({'a systems metric' if metric in SYSTEM_METRICS else f'by workload {name!r}'}), got {given}; "
                f"write {declared}"
            )
    given = study_directions(study.objectives, study.directions)
    for metric in spec.workload.target or {}:
        if metric_direction(metric, known, given) is None:
            raise UserInputError(
                f"{where('workload.target')}: a target needs the metric's direction, and workload {name!r} "
                f"does not declare one for {metric!r}, nor is it one of study.objectives {study.objectives}; "
                f"declare it on the workload: metrics = {{{metric!r}: 'minimize'}} (or 'maximize')"
            )
