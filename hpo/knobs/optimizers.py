"""Optimizer implementation knob. The algorithm is AdamW throughout; the knob picks the kernel path."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from hpo import _imports

OptimizerBuilder = Callable[..., torch.optim.Optimizer]


def _torch_adamw(**impl: bool) -> OptimizerBuilder:
    def build(params: Iterable, *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **impl)

    return build


def _apex_fused_adam(params: Iterable, *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    optimizers = _imports.nvidia_apex_optimizers()
    return optimizers.FusedAdam(params, lr=lr, weight_decay=weight_decay, adam_w_mode=True)


OPTIMIZER_BUILDERS: dict[str, OptimizerBuilder] = {
    "forloop": _torch_adamw(foreach=False, fused=False),
    "foreach": _torch_adamw(foreach=True, fused=False),
    "fused": _torch_adamw(fused=True),
    "apex": _apex_fused_adam,
}


def build_optimizer(impl: str, params: Iterable, *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    return OPTIMIZER_BUILDERS[impl](params, lr=lr, weight_decay=weight_decay)
