"""Where a Hugging Face workload's checkpoint comes from, resolved as transformers resolves
`from_pretrained(name)`: a local folder (config.json inside), else a hub id (`org/name`) read from the
Hugging Face cache (`HF_HUB_CACHE`, by default `~/.cache/huggingface/hub`).

A hub id missing from the cache is downloaded once, by the process that starts the study (`hpo run`
or `hpo worker`, through `fetch`) before its first trial, so that the trial processes never race for
it; they only read the cache. `HF_HUB_OFFLINE` is honoured: nothing is downloaded, and a hub id that
is not in the cache is refused in one line. Torch-free: `hpo validate` runs `check_model`.
"""

from __future__ import annotations

import os
from pathlib import Path

from hpo.errors import UserInputError
from hpo.logging import get_logger

__all__ = ["TOKENIZER_FILES", "check_model", "checkpoint_folder", "fetch", "hub_offline"]

_log = get_logger(__name__)

# Files of a checkpoint folder that decide how text becomes tokens.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "tokenizer.model",
    "added_tokens.json",
)
# What from_pretrained reads from a hub repository: its configs, safetensors weights (one file or
# shards) and tokenizer, not the ONNX, OpenVINO or TensorFlow copies many repositories also hold.
# A repository with only PyTorch pickles gets those instead (WEIGHTS_BIN).
CHECKPOINT_FILES = ["*.json", "model*.safetensors", *TOKENIZER_FILES]
WEIGHTS_BIN = ["pytorch_model*.bin"]
_TRUE = {"1", "on", "yes", "true"}


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or transformers' TRANSFORMERS_OFFLINE), as huggingface_hub reads them."""
    return any(os.environ.get(var, "").strip().lower() in _TRUE for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _cache_dir() -> str | None:
    """HF_HUB_CACHE when set, read now (huggingface_hub reads it once, at its import); None: its default."""
    return os.environ.get("HF_HUB_CACHE") or None


def _is_local(value: str) -> bool:
    return Path(value).expanduser().is_dir()


def _hub_id(key: str, value: str) -> str:
    """`value` as a hub id, or the one-line error for a path that is neither a folder nor an id."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(value)
        return value
    except HFValidationError:
        example = Path(value).parent.name == "hf-example"  # the shipped examples' inputs are written first
        how = (
            f"`python -m hpo.workloads.hf_examples {Path(value).parent}` writes it"
            if example
            else "one written by save_pretrained"
        )
        raise ValueError(
            f"{key}: {value!r} is not a local folder nor a Hugging Face hub id: pass a local checkpoint folder "
            f"({how}) or a hub id such as 'sentence-transformers/all-MiniLM-L6-v2'"
        ) from None


def _cached(repo_id: str) -> str | None:
    """The snapshot folder of `repo_id`'s main revision in the cache, or None; never downloads."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id, cache_dir=_cache_dir(), local_files_only=True)
    except LocalEntryNotFoundError:
        return None
    return folder if (Path(folder) / "config.json").is_file() else None


def _where() -> str:
    from huggingface_hub import constants

    return _cache_dir() or constants.HF_HUB_CACHE


def check_model(key: str, value: str) -> None:
    """What the options check, without downloading: a local checkpoint folder, a hub id in the cache,
    or a hub id that `fetch` will download (the Hub is not offline)."""
    if _is_local(value):
        if not (Path(value).expanduser() / "config.json").is_file():
            raise ValueError(f"{key}: {value!r} has no config.json; pass a checkpoint folder written by save_pretrained")
        return
    if hub_offline() and _cached(_hub_id(key, value)) is None:
        raise ValueError(_offline_line(key, value))


def _offline_line(key: str, value: str) -> str:
    return (
        f"{key}: {value!r} is not in the Hugging Face cache ({_where()}) and HF_HUB_OFFLINE is set: download it "
        f"where the Hub is reachable (hf download {value}) or unset HF_HUB_OFFLINE"
    )


def checkpoint_folder(value: str) -> str:
    """The folder from_pretrained reads for `value`: the local folder, or the hub id's cached snapshot."""
    if _is_local(value):
        return str(Path(value).expanduser())
    folder = _cached(value)
    if folder is None:
        raise UserInputError(
            f"workload.model_name_or_path: {value!r} is not in the Hugging Face cache ({_where()}); "
            f"`hpo run` and `hpo worker` download it before their first trial"
        )
    return folder


def fetch(value: str) -> str | None:
    """Download hub id `value` into the cache unless it is a local folder or cached already; the
    snapshot folder when this call downloaded it, else None."""
    if _is_local(value) or _cached(value) is not None:
        return None
    if hub_offline():
        raise UserInputError(_offline_line("workload.model_name_or_path", value))
    from huggingface_hub import snapshot_download

    _log.info(f"hpo: downloading {value} from the Hugging Face Hub into {_where()} (once, before the first trial)")
    folder = snapshot_download(value, cache_dir=_cache_dir(), allow_patterns=CHECKPOINT_FILES)
    if not any(Path(folder).glob("model*.safetensors")):
        folder = snapshot_download(value, cache_dir=_cache_dir(), allow_patterns=WEIGHTS_BIN)
    return folder
