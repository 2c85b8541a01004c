"""Optional dependencies, each imported in one place. A feature that needs one calls its function,
which raises KnobUnavailable (a recorded verdict) or UserInputError naming the install command."""

from __future__ import annotations

import functools
import importlib
import importlib.util
from types import ModuleType

from hpo.errors import KnobUnavailable, UserInputError


def is_installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@functools.cache
def _import(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def flash_attn() -> ModuleType:
    module = _import("flash_attn")
    if module is None:
        raise KnobUnavailable(
            "attention=flash_attn needs the flash-attn package (pip install 'hpo[gpu]' on a CUDA machine)",
            [("attention", "flash_attn")],
        )
    return module


def xformers_ops() -> ModuleType:
    module = _import("xformers.ops")
    if module is None:
        raise KnobUnavailable(
            "attention=xformers needs the xformers package (pip install 'hpo[gpu]' on a CUDA machine)",
            [("attention", "xformers")],
        )
    return module


def nvidia_apex_optimizers() -> ModuleType:
    """NVIDIA apex's optimizers. The PyPI package called `apex` is an unrelated web toolkit."""
    if not is_installed("apex"):
        raise KnobUnavailable(
            "optimizer=apex needs NVIDIA apex built from source (github.com/NVIDIA/apex)", [("optimizer", "apex")]
        )
    module = _import("apex.optimizers")
    if module is None or not hasattr(module, "FusedAdam"):
        raise KnobUnavailable(
            "optimizer=apex found a package named apex that is not NVIDIA apex (no apex.optimizers.FusedAdam)",
            [("optimizer", "apex")],
        )
    if _import("amp_C") is None:
        raise KnobUnavailable(
            "optimizer=apex found NVIDIA apex without its CUDA extensions (rebuild with --cuda_ext)",
            [("optimizer", "apex")],
        )
    return module


# Optional packages a knob value may need: the name knob specs use (hpo.knobs.registry.Needs) ->
# the loader above. Looked up by name at call time, so a test that replaces a loader is obeyed.
OPTIONAL_PACKAGES = {"flash_attn": "flash_attn", "xformers": "xformers_ops", "apex": "nvidia_apex_optimizers"}


def require(package: str) -> ModuleType:
    """The optional package `package` (a key of OPTIONAL_PACKAGES); KnobUnavailable if unusable."""
    if package not in OPTIONAL_PACKAGES:
        raise KeyError(f"package must be one of {list(OPTIONAL_PACKAGES)}, got {package!r}")
    return globals()[OPTIONAL_PACKAGES[package]]()


def optuna_dashboard() -> ModuleType:
    module = _import("optuna_dashboard")
    if module is None:
        raise UserInputError("hpo dashboard needs optuna-dashboard: pip install 'hpo[dashboard]'")
    return module
