"""What a systems knob is: the one class every knob module under `hpo.knobs.systems` fills in.

A knob module declares, in one place, everything hpo knows about `systems.<name>`:
- its values, its default and its value in the reference combination (the plainest path the probe
  compares every trial with), and the schema of one value;
- what it is applied to: the model or the optimizer (its `hook`, a `hpo.knobs.model_hooks.ModelHook`
  whose stages hpo's engine runs for every knob in a declared order), the process (a context around
  every step, `applied`), the loader (`hpo.engine._loader`) or the ranks (`ParallelKnob`);
- how a real step shows what ran (`observe`, `read_in_step`) and how that is compared with the
  request (`mismatches`);
- what each exporter writes for it (`python_loop`, `hf`, `lightning`).

The schema, a trial's `Knobs` and `LoaderSettings`, the `knobs_requested`/`knobs_observed` records,
the exporters and the command line's lists are derived from these declarations (`hpo.knobs.systems`
collects them), so adding a knob is adding one module.

Torch is never imported at module level here or in a knob module: `hpo validate` reads the values.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple

from hpo.knobs.export_parts import HfPart, LightningPart, LoopPart
from hpo.knobs.model_hooks import NO_HOOK, ModelHook, loaded_hook

__all__ = [
    "AppliesTo",
    "HfPart",
    "Knob",
    "LightningPart",
    "LoaderKnob",
    "LoopPart",
    "Mismatch",
    "Needs",
    "ParallelKnob",
    "Seen",
    "by_name",
    "knobs_in",
]

AppliesTo = Literal["model", "optimizer", "process", "loader", "ranks"]


@dataclass(frozen=True, kw_only=True)
class Needs:
    """What a knob value needs to run; `hpo doctor` checks these in this order."""

    package: str | None = None  # an optional package, by its name in `hpo.deps.OPTIONAL_PACKAGES`
    devices: tuple[str, ...] = ()  # the device types its kernels exist for; empty: any
    probe: str | None = None  # a function of `hpo.hardware.probes`: probe(*probe_args, device) -> Capability
    probe_args: tuple[str, ...] = ()


def by_name(*specs: Any) -> dict[str, Any]:
    """A knob's value specs, keyed by their `name`, in the order given."""
    return {spec.name: spec for spec in specs}


def knobs_in(package: str, path: Any) -> dict[str, Any]:
    """The knobs declared by a package's modules (each exposes `KNOB`), by `position`: found, not
    listed. A module's name is its knob's."""
    knobs = []
    for module in pkgutil.iter_modules(path):
        declared = getattr(importlib.import_module(f"{package}.{module.name}"), "KNOB", None)
        if declared is None:
            continue
        if declared.name != module.name:
            raise ImportError(f"knob module {module.name}.py declares {declared.name}: a knob's module is named after it")
        knobs.append(declared)
    return {k.name: k for k in sorted(knobs, key=lambda k: k.position)}


class Mismatch(NamedTuple):
    """A knob the evidence shows did not run as requested."""

    knob: str
    asked: object
    ran: object
    how: str = ""  # the evidence's own words, where "ran X" would not say it

    def __str__(self) -> str:
        return f"{self.knob}: {self.how}" if self.how else f"{self.knob}: asked {self.asked}, ran {self.ran}"


@dataclass(frozen=True)
class Seen:
    """What a finished trial shows of its knobs: the step's evidence, the loader's, its own config's `systems`."""

    observed: dict[str, Any]  # knobs_observed
    loader: dict[str, Any] | None  # loader_observed; None: hpo built no loader
    systems: dict[str, Any]


class Knob:
    """One systems knob (`systems.<name>`). A module under `hpo.knobs.systems` subclasses it and
    exposes one instance as `KNOB`."""

    name: ClassVar[str]
    help: ClassVar[str]  # one line: what it changes, for the docs and the schema
    position: ClassVar[int]  # where configs, records and tables list it (ascending)
    applies_to: ClassVar[AppliesTo]
    # A model or optimizer knob's application, as "module:attr" of a ModelHook (it imports torch): None, none.
    hook: ClassVar[str | None] = None
    values: ClassVar[tuple[Any, ...]] = ()  # every allowed value; () when `schema` alone bounds it
    values_text: ClassVar[str] = ""  # the allowed values in words, where `values` cannot list them
    # Each named value's spec (what it needs, how it is built and recognised), where values have one.
    specs: ClassVar[Mapping[str, Any]] = {}
    default: ClassVar[Any]  # the value where a file names none
    reference: ClassVar[Any]  # its value in the reference combination
    value_type: ClassVar[Any]  # the Python type of one value (a trial's `Knobs` field)
    schema: ClassVar[Any] = None  # the pydantic annotation of one value; None: Literal[values]
    # Fields this knob fills in `knobs_observed`: name -> (annotation, default; ... when required).
    observed_fields: ClassVar[dict[str, tuple[Any, Any]]] = {}
    column: ClassVar[str | None] = None  # a table's header for it, where its name is too wide
    cli_flag: ClassVar[str | None] = None  # `hpo gpu-check`'s flag for it; None: --<name with dashes>
    gpu_check_values: ClassVar[tuple[Any, ...] | None] = None  # what gpu-check runs by default; None: every value
    # A trial without evidence of it cannot be exported; False for a knob observed only where it does something.
    evidence_required: ClassVar[bool] = True
    # Changed between a study's trials, it would change what the sampler searched: fixed once the study exists.
    fixed_in_study: ClassVar[bool] = True

    @property
    def header(self) -> str:
        return self.column or self.name

    @property
    def flag(self) -> str:
        return self.cli_flag or "--" + self.name.replace("_", "-")

    @staticmethod
    def cli_text(value: Any) -> str:
        """A value as the command line spells it (`false`, `true`, a name)."""
        if value is None:
            return "null"
        return str(value).lower() if isinstance(value, bool) else str(value)

    def from_cli(self, text: str) -> Any:
        """The value the command line's `text` names (one of `cli_text`'s spellings of `values`)."""
        return next(v for v in self.values if self.cli_text(v) == text)

    def value_schema(self) -> Any:
        """The pydantic annotation of one value of this knob."""
        return self.schema if self.schema is not None else Literal[self.values]  # type: ignore[valid-type]

    def normalized(self, value: Any) -> Any:
        """`value` as the knob's own spelling (the schema reads other spellings through this)."""
        return value

    def model_hook(self) -> ModelHook:
        """How this knob is applied to the model and optimizer (`hpo.knobs.model_hooks`), loaded on first use."""
        return loaded_hook(self.hook) if self.hook else NO_HOOK

    def applied(self, value: Any, device_type: str) -> contextlib.AbstractContextManager:
        """The setting in force around every step of a trial for `value`: a `process` knob's
        application, a model knob's `around_step` (attention's pinned kernel)."""
        return self.model_hook().around_step(value, device_type)

    def read_in_step(self, device_type: str) -> Any:
        """What this knob's setting is while a step runs (read inside the profiled step); None: nothing to read."""
        return None

    def observe(self, evidence: Any) -> dict[str, Any]:
        """This knob's `knobs_observed` fields, from a step's evidence (`hpo.evidence.observe.StepEvidence`)."""
        return {}

    def mismatches(self, asked: Any, observed: dict[str, Any], knobs: Any) -> list[Mismatch]:
        """How the observed step contradicts the request; a knob nothing observed (None) contradicts nothing."""
        ran = observed.get(self.name)
        return [] if ran is None or ran == asked else [Mismatch(self.name, asked, ran)]

    def implicated(self, mismatch: Mismatch, knobs: dict[str, Any]) -> list[tuple[str, Any]]:
        """The knob values a mismatch of this knob blames."""
        return [(self.name, knobs[self.name])] if self.name in knobs else []

    def ran(self, seen: Seen) -> Any:
        """The value a trial ran, for an export, from its evidence; None: no evidence of it."""
        return seen.observed.get(self.name)

    def refused_export(self, value: Any) -> str | None:
        """Why an export cannot reproduce `value` (one line); None: it can."""
        return None

    # What each exporter writes for the value the trial ran; `w` is the trial as `hpo.app.export_as.winner`
    # reads it: `w.knobs` (each knob's `ran` value), its hyperparameters, device and workload.
    def python_loop(self, w: Any) -> LoopPart:
        return LoopPart()

    def hf(self, w: Any) -> HfPart:
        return HfPart()

    def lightning(self, w: Any) -> LightningPart:
        return LightningPart()

    def __repr__(self) -> str:
        return f"<knob systems.{self.name}>"


class LoaderKnob(Knob):
    """A torch DataLoader setting searched like a knob. hpo builds the loader (`hpo.engine._loader`) and
    checks that it delivers the batches num_workers=0 would (`hpo.engine._loader_stream`)."""

    applies_to = "loader"
    # How a study's trials load their batches does not change what the sampler searched over the model.
    fixed_in_study = False
    needs_workers: ClassVar[bool] = False  # only a loader with worker processes has it: with num_workers 0 it is refused
    hf_argument: ClassVar[str | None] = None  # transformers TrainingArguments' name for it

    def loader_mismatches(self, asked: Any, loader_observed: dict[str, Any]) -> list[Mismatch]:
        """How what delivered the batches contradicts the request; most settings show only in the batches' order."""
        return []

    def ran(self, seen: Seen) -> Any:
        """As its trial's config set it: the loader check proved the batches it delivered."""
        return seen.systems.get(self.name, self.default)

    def python_loop(self, w: Any) -> LoopPart:
        value = w.knobs[self.name]
        return LoopPart(loader={self.name: value} if value != self.default else {})

    def hf(self, w: Any) -> HfPart:
        value = w.knobs[self.name]
        if value == self.default or self.hf_argument is None:
            return HfPart()
        return HfPart(args={self.hf_argument: value})

    def lightning(self, w: Any) -> LightningPart:
        value = w.knobs[self.name]
        return LightningPart(loader={self.name: value} if value != self.default else {})


class ParallelKnob(Knob):
    """A knob of a trial that runs as several ranks (`systems.parallel.<name>`), applied when the
    ranks wrap the model (`hpo.parallel.wrap`). Each rank observes its effect (`hpo.parallel.observe`);
    `contradiction` says, in words, how that contradicts the request."""

    applies_to = "ranks"
    strategy: ClassVar[str | None] = None  # the one strategy it acts on; None: it chooses the strategy

    def contradiction(self, requested: Any, seen: dict[str, Any]) -> str | None:
        """Why `seen`, the effect one rank observed, contradicts `requested`; None when it agrees."""
        return None
