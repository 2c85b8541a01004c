"""The precision knob as a plugin, in Lightning's style: one object holds the autocast region, the
fp16 GradScaler and the Lightning string together, so the loop never asks "is this fp16?".

`precision_plugin(name, device_type)` parses the knob value once, from its spec in
`hpo.knobs.registry.PRECISION_SPECS`: full precision is `PrecisionPlugin`, autocast is `MixedPrecision`.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from hpo.knobs.model_hooks import Assembly, ModelHook
from hpo.knobs.registry import PRECISION_SPECS, spec_for
from hpo.torch_compat import found_inf_per_device, unscales_in_its_step

__all__ = ["DTYPES", "PRECISION_HOOK", "MixedPrecision", "PrecisionPlugin", "precision_plugin"]

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, spec.dtype) for name, spec in PRECISION_SPECS.items()}


class PrecisionPlugin:
    """Full fp32 precision ("32-true"): no autocast region, no loss scaling."""

    lightning = "32-true"
    scaler: torch.amp.GradScaler | None = None

    def forward_context(self) -> contextlib.AbstractContextManager:
        """The region forward runs in; fp32 enters none rather than a disabled autocast."""
        return contextlib.nullcontext()

    def convert_module(self, module: nn.Module) -> nn.Module:
        """The module as this precision trains it (mixed precision keeps fp32 weights)."""
        return module

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def clip_gradients(self, module: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float) -> None:
        """Clip the gradients' total norm to `max_norm` (0 or less: no clipping)."""
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm)

    def found_inf(self, optimizer: torch.optim.Optimizer) -> torch.Tensor | None:
        """A device flag, nonzero when the step's (unscaled) gradients hold inf/NaN; None when no
        loss scaling checks them. Reading it is the caller's one host sync."""
        return None

    def optimizer_step(self, optimizer: torch.optim.Optimizer, found_inf: bool | None = None) -> None:
        optimizer.step()

    def renewed(self) -> PrecisionPlugin:
        """This plugin as a restart makes it again: the same precision, a fresh loss scale."""
        return PrecisionPlugin()


class MixedPrecision(PrecisionPlugin):
    """Autocast to `dtype` on `device_type`; with a `scaler`, the loss is scaled for backward and the
    gradients unscaled before clipping and the step (which the scaler skips on inf/nan)."""

    def __init__(self, dtype: torch.dtype, device_type: str, scaler: torch.amp.GradScaler | None = None):
        self.dtype, self.device_type, self.scaler = dtype, device_type, scaler
        self._unscaled: set[int] = set()  # optimizers unscaled since the scaler's last update

    @property
    def lightning(self) -> str:  # type: ignore[override]
        return next(s.lightning for s in PRECISION_SPECS.values() if s.autocast and DTYPES[s.name] == self.dtype)

    def forward_context(self) -> contextlib.AbstractContextManager:
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def clip_gradients(self, module: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float) -> None:
        self.unscale_gradients(optimizer)  # max_norm is in the loss's own units, not the scaled ones
        super().clip_gradients(module, optimizer, max_norm)

    def found_inf(self, optimizer: torch.optim.Optimizer) -> torch.Tensor | None:
        if self.scaler is None:
            return None
        self.unscale_gradients(optimizer)
        return sum(found_inf_per_device(self.scaler, optimizer).values())  # on the device: no sync

    def optimizer_step(self, optimizer: torch.optim.Optimizer, found_inf: bool | None = None) -> None:
        """Step unless the gradients are inf/NaN, as GradScaler.step does. `found_inf`, when the caller
        has read `self.found_inf()` already, spares the host read GradScaler.step makes for optimizers
        without their own scaling (`_maybe_opt_step`'s `.item()`); fused ones get the flag on the
        device through GradScaler.step and skip inside their kernel."""
        if self.scaler is None:
            optimizer.step()
            return
        self.unscale_gradients(optimizer)
        if found_inf is None or unscales_in_its_step(optimizer):
            self.scaler.step(optimizer)
        elif not found_inf:
            optimizer.step()  # unscaled, finite gradients: what GradScaler.step would run
        self.scaler.update()
        self._unscaled.discard(id(optimizer))

    def renewed(self) -> MixedPrecision:
        scaler = torch.amp.GradScaler(self.device_type) if self.scaler is not None else None
        return MixedPrecision(self.dtype, self.device_type, scaler)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """The gradients in the loss's own units, once per optimizer between updates (GradScaler allows
        one unscale_ there; clipping may have done it)."""
        if self.scaler is not None and id(optimizer) not in self._unscaled:
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))


def precision_plugin(name: str, device_type: str) -> PrecisionPlugin:
    """The plugin for precision knob value `name` on `device_type` (parsed once, here)."""
    spec = spec_for("precision", name)
    if not spec.autocast:
        return PrecisionPlugin()
    # fp16 gradients underflow without loss scaling; bf16 has fp32's exponent range and needs none.
    scaler = torch.amp.GradScaler(device_type) if spec.scaled else None
    return MixedPrecision(getattr(torch, spec.dtype), device_type, scaler)


class PrecisionHook(ModelHook):
    """`systems.precision` applied: the trial's plugin, kept as `assembly.precision`, converts the
    module, owns the autocast region around forward and fp16's GradScaler, which a restart renews."""

    def apply_to_model(self, assembly: Assembly, value: str) -> None:
        assembly.precision = precision_plugin(value, assembly.device.type)
        assembly.model = assembly.precision.convert_module(assembly.model)

    def restart(self, assembly: Assembly, value: str) -> None:
        # Renewed, not made again from `value`: a rank's FSDP2 fp16 model runs its knobs at fp32 and
        # its loss scaling is the sharded plugin wrapping put in (hpo.parallel.sharded_scaling).
        assembly.precision = assembly.precision.renewed()  # a new GradScaler

    def around_forward(self, assembly: Assembly, value: str) -> contextlib.AbstractContextManager:
        return assembly.precision.forward_context()


PRECISION_HOOK = PrecisionHook()
