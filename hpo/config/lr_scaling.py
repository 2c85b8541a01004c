"""`params.lr_scaling: linear | sqrt | none`: how the learning rate follows the batch that
`batch_size: auto` chose. `params.lr` is the rate at the batch the user names as
`batch_size: {auto: {base_batch: N}}`; a trial at batch B trains at lr x B/N (linear) or
lr x sqrt(B/N) (sqrt). Never implicit: the default is none, and a scaling needs its base batch."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from hpo.config.params import AutoBatch, Fixed, ParamSpec
from hpo.errors import UserInputError

__all__ = ["SCALINGS", "attach_lr_scaling", "record", "scaled_lr"]

SCALINGS = ("none", "linear", "sqrt")


def attach_lr_scaling(params: dict[str, ParamSpec], path: str) -> dict[str, ParamSpec]:
    """The params with `lr_scaling` checked and moved onto the automatic batch it scales from.
    `path` is the key path of `params` in the user's file."""
    if "lr_scaling" not in params:
        return _check_base_batch(params, path)
    params = dict(params)
    where = f"{path}.lr_scaling"
    value = _fixed_scaling(params.pop("lr_scaling"), where)
    if value == "none":
        return _check_base_batch(params, path)
    auto = params.get("batch_size")
    _check_scalable(auto, value, where)
    params["batch_size"] = dataclasses.replace(auto, lr_scaling=value)
    return params


def _fixed_scaling(spec: ParamSpec, where: str) -> str:
    """The scaling `spec` fixes: one of SCALINGS, never searched."""
    value = spec.value if isinstance(spec, Fixed) else None
    if value not in SCALINGS:
        shown = spec.value if isinstance(spec, Fixed) else "a searched value"
        raise UserInputError(f"{where}: one of none, linear, sqrt (fixed, not searched), got {shown!r}")
    return value


def _check_scalable(auto: ParamSpec | None, value: str, where: str) -> None:
    """A scaling needs `batch_size: auto` to choose the batch, and the base batch `lr` is the rate for."""
    if not isinstance(auto, AutoBatch):
        raise UserInputError(
            f"{where}: {value} scales lr to the batch that batch_size: auto chooses, got batch_size "
            f"{getattr(auto, 'value', auto)!r}; set batch_size: {{auto: {{base_batch: N}}}} or lr_scaling: none"
        )
    if auto.base_batch is None:
        raise UserInputError(
            f"{where}: {value} needs the batch params.lr is the rate for, got none; "
            f"set batch_size: {{auto: {{base_batch: N}}}} (e.g. the batch lr was tuned at)"
        )


def _check_base_batch(params: dict[str, ParamSpec], path: str) -> dict[str, ParamSpec]:
    auto = params.get("batch_size")
    if isinstance(auto, AutoBatch) and auto.base_batch is not None:
        raise UserInputError(
            f"{path}.batch_size.auto.base_batch: used only by lr_scaling linear or sqrt, got base_batch "
            f"{auto.base_batch} with lr_scaling none; set params.lr_scaling or remove base_batch"
        )
    return params


def scaled_lr(lr: float, batch: int, auto: AutoBatch) -> float:
    """The rate a trial at `batch` trains at, `lr` being the rate at `auto.base_batch`."""
    if auto.lr_scaling == "none":
        return lr
    ratio = batch / auto.base_batch
    return lr * (ratio if auto.lr_scaling == "linear" else math.sqrt(ratio))


def record(auto: AutoBatch) -> dict[str, Any]:
    """`params.lr_scaling` as the file spelled it, when it scales."""
    return {} if auto.lr_scaling == "none" else {"lr_scaling": auto.lr_scaling}
