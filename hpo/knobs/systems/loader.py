"""`systems.loader`: what builds a trial's batches from the workload's dataset: torch's DataLoader,
or NVIDIA DALI (refused where it cannot run; no DALI pipeline is searched on a CPU)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpo.knobs.knob import HfPart, LoaderKnob, Needs, by_name

__all__ = ["KNOB", "LOADER_SPECS", "LoaderSpec"]


@dataclass(frozen=True, kw_only=True)
class LoaderSpec:
    """An input-pipeline backend: what builds a trial's batches from a workload's dataset."""

    name: str
    needs: Needs = field(default_factory=Needs)


LOADER_SPECS: dict[str, LoaderSpec] = by_name(
    LoaderSpec(name="torch"),
    # No DALI pipeline is built: the value exists so that a space naming it is refused before the
    # first trial where it cannot run, and at its trial everywhere else.
    LoaderSpec(name="dali", needs=Needs(package="nvidia_dali", devices=("cuda",))),
)


class Loader(LoaderKnob):
    name = "loader"
    help = "what builds the batches from the workload's dataset: torch's DataLoader, or NVIDIA DALI"
    position = 110
    specs = LOADER_SPECS
    default = "torch"
    reference = "torch"
    value_type = str

    @property
    def values(self) -> tuple:  # type: ignore[override]
        """Every value with a spec: a spec added to LOADER_SPECS is an allowed value."""
        return (*LOADER_SPECS,)

    def hf(self, w: Any) -> HfPart:
        if w.knobs["loader"] == self.default:
            return HfPart()
        return HfPart(notes=[f"# loader={w.knobs['loader']}: the Trainer builds torch DataLoaders only"])


KNOB = Loader()
