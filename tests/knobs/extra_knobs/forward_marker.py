"""`systems.forward_marker`: a model knob that exists only in tests, declared in one module exactly
as a module of `hpo.knobs.systems` is, hook included.

On, the model the step calls runs inside a profiler range named `MARK` (its hook wraps the forward,
`ModelHook.wrap_forward`); observed from the profiler's ops; compared with the request by
`Knob.mismatches`' default. Like a real knob module it imports no torch at module level."""

from __future__ import annotations

from typing import Any

from hpo.knobs.knob import Knob
from hpo.knobs.model_hooks import Assembly, ModelHook

__all__ = ["HOOK", "KNOB", "MARK"]

MARK = "hpo_test_forward_marker"


class ForwardMarkerHook(ModelHook):
    """Wraps the forward the step calls; counts the wrapped forwards it ran, as a second witness."""

    def __init__(self) -> None:
        self.forwards = 0

    def wrap_forward(self, assembly: Assembly, value: bool, forward: Any) -> Any:
        return _marked(forward, self) if value else forward


def _marked(inner: Any, hook: ForwardMarkerHook) -> Any:
    import torch

    class Marked(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            hook.forwards += 1
            with torch.profiler.record_function(MARK):
                return self.inner(*args, **kwargs)

    return Marked()


HOOK = ForwardMarkerHook()


class ForwardMarker(Knob):
    name = "forward_marker"
    help = "test only: run the model's forward inside a named profiler range"
    position = 1000
    applies_to = "model"
    hook = f"{__name__}:HOOK"
    values = (False, True)
    default = False
    reference = False
    value_type = bool
    schema = bool
    observed_fields = {"forward_marker": (bool, ...)}

    def observe(self, evidence: Any) -> dict[str, Any]:
        return {"forward_marker": MARK in evidence.profiler_ops}


KNOB = ForwardMarker()
