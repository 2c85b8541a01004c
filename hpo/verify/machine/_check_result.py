"""What a machine cannot run, as data: the values and (attention, precision) pairs
`hpo.verify.machine._kernel_check` found on it, and the set logic a worker needs from them. Imports no torch:
a worker keeps torch out of its own process and checks its machine in a child
(`hpo.runtime._machine_check`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hpo.knobs.registry import VALUE_SPECS, Needs
from hpo.verdicts import Part

__all__ = ["CHECKED_KNOBS", "MachineCheck", "NotRunnable", "nothing_left", "render", "searched_parts"]

# The knobs whose values declare needs in the registry (grad_checkpointing and compile declare none),
# and the input-pipeline backend (`systems.loader`: dali needs its package and CUDA).
# The knobs with a value that needs something (a package, a device, a capability): what a machine check checks.
CHECKED_KNOBS = tuple(
    name for name, specs in VALUE_SPECS.items() if any(getattr(spec, "needs", Needs()) != Needs() for spec in specs.values())
)


@dataclass(frozen=True)
class NotRunnable:
    """A value, or an (attention, precision) pair, that cannot run on this machine, and why."""

    part: Part
    why: str

    def line(self) -> str:
        """One line for people: the part, then why (a package loader's reason already names it)."""
        head = render(self.part)
        return self.why if self.why.startswith(head) else f"{head}: {self.why}"


@dataclass(frozen=True)
class MachineCheck:
    """What `check_values` found on `device` (the device's model, as verdicts name it)."""

    device: str
    not_runnable: tuple[NotRunnable, ...] = ()
    unchecked: tuple[str, ...] = ()  # tiny runs that failed with no known refusal
    # what a probe said of a value that can run (bf16 "emulated: ..., slow"): (knob, value) -> text
    remarks: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def parts(self) -> set[Part]:
        return {n.part for n in self.not_runnable}

    def value_why(self, knob: str, value) -> str | None:
        """Why `knob=value` cannot run here at all; None when it can (with every precision or some)."""
        return next((n.why for n in self.not_runnable if n.part == ((knob, value),)), None)

    def pairs_with(self, knob: str, value) -> dict[str, str]:
        """The precisions `knob=value` is refused with here: precision -> why."""
        return {
            dict(n.part)["precision"]: n.why
            for n in self.not_runnable
            if len(n.part) == 2 and (knob, value) in n.part and knob != "precision"
        }


def render(part: Part) -> str:
    """`attention=sdpa_flash with precision=fp32`: the part's knob values, the knob first."""
    values = sorted(part, key=lambda kv: kv[0] == "precision")
    return " with ".join(f"{k}={v}" for k, v in values)


def nothing_left(systems: Mapping[str, Sequence], parts: Iterable[Part]) -> bool:
    """Whether every combination of `systems`' precision, attention and optimizer values contains
    an excluded part (a value or a pair): then no trial can run here."""
    excluded = [dict(p) for p in parts]
    combos: list[dict] = [{}]
    for knob in CHECKED_KNOBS:
        combos = [{**c, knob: v} for c in combos for v in dict.fromkeys(systems.get(knob, ())) or [None]]
    return all(any(all(c.get(k) == v for k, v in p.items()) for p in excluded) for c in combos)


def searched_parts(systems: Mapping[str, Sequence], parts: Iterable[Part]) -> set[Part]:
    """The parts as the sampler must avoid them: a knob the space fixes is no trial param, so it
    is dropped from a part (every trial has that value: sdpa_flash refused with fp32 and precision
    fixed at fp32 means sdpa_flash alone), and a part that needs another value of it never applies."""
    reduced = set()
    for part in parts:
        fixed = {k: v for k, v in part if len(dict.fromkeys(systems.get(k, ()))) == 1}
        if all(list(systems.get(k, ())) == [v] for k, v in fixed.items()):
            reduced.add(tuple((k, v) for k, v in part if k not in fixed))
    return reduced
