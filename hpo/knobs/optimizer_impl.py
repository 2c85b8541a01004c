"""The optimizer-implementation knob applied to an optimizer someone else built (a Lightning
module's `configure_optimizers`): the same class, parameter groups and hyperparameters, rebuilt
with the trial's for-loop, foreach or fused path.

A class whose constructor has no `fused` (or `foreach`) argument has no such path in torch. That is
a verdict, never a quiet for-loop: torch would accept the flag on the group and ignore it.
"""

from __future__ import annotations

import inspect

import torch

from hpo.errors import KnobUnavailable
from hpo.knobs.registry import OPTIMIZER_SPECS

__all__ = ["IMPLEMENTATION_FLAGS", "with_implementation"]

# The torch paths, from the registry; a value without torch flags (apex) brings its own class.
IMPLEMENTATION_FLAGS: dict[str, dict[str, bool]] = {
    name: dict(spec.torch_flags) for name, spec in OPTIMIZER_SPECS.items() if spec.torch_flags is not None
}


def _listed(names) -> str:
    *first, last = names
    return f"{', '.join(first)} and {last}" if first else last


def with_implementation(optimizer: torch.optim.Optimizer, impl: str) -> torch.optim.Optimizer:
    """A new optimizer of `optimizer`'s class over the same parameter groups, running `impl`."""
    cls = type(optimizer)
    if impl not in IMPLEMENTATION_FLAGS:
        raise KnobUnavailable(
            f"optimizer={impl}: only {_listed(IMPLEMENTATION_FLAGS)} apply to a module's own "
            f"optimizer ({cls.__name__}); {impl} replaces the optimizer class",
            [("optimizer", impl)],
        )
    accepted = inspect.signature(cls.__init__).parameters
    flags = IMPLEMENTATION_FLAGS[impl]
    missing = [name for name, on in flags.items() if on and name not in accepted]
    if missing:
        raise KnobUnavailable(f"optimizer={impl}: torch's {cls.__name__} has no {impl} implementation", [("optimizer", impl)])
    drop = set(flags)
    groups = [{k: v for k, v in group.items() if k not in drop} for group in optimizer.param_groups]
    defaults = {k: v for k, v in optimizer.defaults.items() if k not in drop and k in accepted}
    return cls(groups, **defaults, **{k: v for k, v in flags.items() if k in accepted})
