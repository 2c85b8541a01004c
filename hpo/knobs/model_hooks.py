"""How a model or optimizer knob is applied: the stages of assembling a trial's model, as the methods
of the knob's `ModelHook` (a knob names its hook in `Knob.hook`; `Knob.model_hook()` loads it).

hpo's engine (`hpo.engine._assembly.AssembledModel`) runs every trial knob's hook through these
stages, in this order, and within a stage in the knobs' `position` order; no stage names a knob:

1. `build_kwargs(value)`: keyword arguments of `workload.build_model` (attention: the workload's
   attention layers call the kernel it names, so it is chosen before the model exists).
2. `apply_to_model(assembly, value)`: the built model, on its device. Precision sets
   `assembly.precision` (the plugin that owns autocast and fp16's GradScaler) and converts the
   module; checkpointing wraps the workload's checkpoint blocks, and counts their plain runs only
   when compile is off (compiled graphs show checkpointing themselves).
3. `wrap_forward(assembly, value, forward)`: the module the step calls, once every stage-2 change is
   made (compile wraps it, so its graphs trace the checkpointed blocks).
4. `build_optimizer(assembly, value, parameters)`: over the final model's parameters; exactly one
   knob builds it (optimizer). `AssembledModel.restart` builds it again, after stage 5.
5. `restart(assembly, value)`: what a restart renews before the optimizer (precision: a GradScaler
   with its scale back at the start).

Around each step: `around_step(value, device_type)` is in force around forward and backward alike
(attention pins its SDPA kernel); `Knob.applied` enters it, so Lightning's loop gets it too.
`around_forward(assembly, value)` is in force around forward and evaluation only (precision's
autocast, compile's refusal to fall back to eager).

A hook imports torch; a knob module imports none, so it names its hook as "module:attr" (as a
value spec names its builder) rather than importing it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Iterable
from typing import Any, Protocol

__all__ = ["NO_HOOK", "Assembly", "Hooked", "ModelHook", "apply_to_model", "build_kwargs", "fills_in", "loaded_hook"]


class Assembly(Protocol):
    """What a hook reads and sets of the model being assembled (`hpo.engine._assembly.AssembledModel`)."""

    workload: Any  # hpo.workloads.base.Workload
    training: Any  # hpo.config.trial.TrainingConfig
    device: Any  # torch.device
    values: dict[str, Any]  # every trial knob's value, by name
    model: Any  # the torch module; stage 2 may replace it
    forward_model: Any  # what the step calls: the model, as stage 3 wrapped it
    precision: Any  # hpo.knobs.precision_plugins.PrecisionPlugin: backward, clipping, the optimizer step
    recompute: Any  # hpo.knobs.recompute.RecomputeCounter: checkpoint blocks' runs, for the evidence
    graphs: Any  # hpo.knobs.compiled_graphs.GraphRecord: what compiled graphs held, for the evidence


class ModelHook:
    """A model or optimizer knob's application, stage by stage; each default leaves the model as it is."""

    def build_kwargs(self, value: Any) -> dict[str, Any]:
        """Keyword arguments this knob adds to `workload.build_model`."""
        return {}

    def apply_to_model(self, assembly: Assembly, value: Any) -> None:
        """Change the built model (or what the assembly keeps beside it) for `value`."""

    def wrap_forward(self, assembly: Assembly, value: Any, forward: Any) -> Any:
        """The module the step calls, given the one the knobs before this one left."""
        return forward

    def build_optimizer(self, assembly: Assembly, value: Any, parameters: Iterable[Any]) -> Any:
        """The trial's optimizer over `parameters`; None: this knob does not build it."""
        return None

    def restart(self, assembly: Assembly, value: Any) -> None:
        """Renew what this knob keeps for training, before a restart rebuilds the optimizer."""

    def around_step(self, value: Any, device_type: str) -> contextlib.AbstractContextManager:
        """The setting in force around forward and backward alike."""
        return contextlib.nullcontext()

    def around_forward(self, assembly: Assembly, value: Any) -> contextlib.AbstractContextManager:
        """The region forward and evaluation run in (not backward)."""
        return contextlib.nullcontext()


NO_HOOK = ModelHook()  # a knob applied elsewhere (the process, the loader, the ranks)


def fills_in(hook: ModelHook, stage: str) -> bool:
    """Whether `hook` has its own `stage` (as Lightning's `is_overridden`): a step enters only the
    contexts that do something, not every knob's no-op default around every forward."""
    return getattr(type(hook), stage) is not getattr(ModelHook, stage)


# A knob's name, its hook and the trial's value of it (`hpo.knobs.systems.model_hooks`, in position order).
Hooked = tuple[str, ModelHook, Any]


def build_kwargs(hooks: list[Hooked]) -> dict[str, Any]:
    """Stage 1: the keyword arguments of `workload.build_model`, from every knob that adds one."""
    kwargs: dict[str, Any] = {}
    for name, hook, value in hooks:
        for key, arg in hook.build_kwargs(value).items():
            if key in kwargs:
                raise ValueError(f"two knobs set build_model's {key!r} ({name} and one before it): give it to one knob")
            kwargs[key] = arg
    return kwargs


def apply_to_model(assembly: Assembly, hooks: list[Hooked]) -> None:
    """Stages 2 and 3 on the built `assembly.model`: each knob changes it, then each wraps the
    forward (`assembly.forward_model`), so a wrapper (compile) sees the model every knob made."""
    for _, hook, value in hooks:
        hook.apply_to_model(assembly, value)
    assembly.forward_model = assembly.model
    for _, hook, value in hooks:
        assembly.forward_model = hook.wrap_forward(assembly, value, assembly.forward_model)


@functools.cache
def loaded_hook(ref: str) -> ModelHook:
    """The ModelHook a knob names as "module:attr" (imported here, on first use)."""
    module, _, attr = ref.partition(":")
    hook = getattr(importlib.import_module(module), attr)
    if not isinstance(hook, ModelHook):
        raise TypeError(f"a knob's hook must name a ModelHook instance; {ref} is a {type(hook).__name__}: make it one")
    return hook
