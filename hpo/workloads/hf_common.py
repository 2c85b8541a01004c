"""What the two Hugging Face workloads share: loading a local checkpoint with the trial's attention,
the blocks to recompute, and tokenized data cached on disk per (files, tokenizer, settings).

The cache matters because every trial builds its workload afresh, often in a new process: the
first trial tokenizes and writes `<cache_dir>/<key>.pt`; later trials (and later studies) load it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpo.errors import KnobUnavailable, UserInputError
from hpo.workloads.options.hf_models import TOKENIZER_FILES, checkpoint_folder
from hpo.workloads.text_classification import hf_attention_implementation, own_weights, quiet_transformers

__all__ = ["cache_folder", "cached", "checkpoint_layers", "load_pretrained", "load_tokenizer", "pad_rows"]

CACHE_FORMAT = 1


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    with quiet_transformers():
        return AutoTokenizer.from_pretrained(checkpoint_folder(path), local_files_only=True)


def load_pretrained(auto_class: str, path: str, attention: str, seed: int, overrides: dict[str, Any], **config: Any) -> nn.Module:
    """`transformers.<auto_class>.from_pretrained(path)` with the trial's attention. A value the model
    class refuses (no SDPA support, flash-attn missing) is an `incompatible` verdict, never a
    fallback; so is a model that came back with another implementation than the one asked for. `path`:
    a local folder or a hub id, read from the Hugging Face cache (hf_models)."""
    path = checkpoint_folder(path)
    impl = hf_attention_implementation(attention)  # flash_attn/xformers: raises KnobUnavailable when missing
    import transformers

    cls = getattr(transformers, auto_class)
    if overrides:
        _check_overrides_exist(transformers, path, overrides)
        config = {**config, **overrides}
    with quiet_transformers(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # new heads are drawn from a forked RNG: same seed, same model
        model = _from_pretrained_with(cls, path, impl, attention, config)
    got = model.config._attn_implementation
    if got != impl:
        raise KnobUnavailable(
            f"attention={attention} asked transformers for {impl!r}, which set {got!r}", [("attention", attention)]
        )
    own_weights(model)
    return model


def _check_overrides_exist(transformers, path: str, overrides: dict[str, Any]) -> None:
    """Each override names an attribute of the checkpoint's config: a misspelt one is an error, not ignored."""
    loaded = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    unknown = sorted(k for k in overrides if not hasattr(loaded, k))
    if unknown:
        raise UserInputError(f"workload.config_overrides: {unknown} are not attributes of the config in {path!r}")


def _from_pretrained_with(cls, path: str, impl: str, attention: str, config: dict[str, Any]) -> nn.Module:
    """`cls.from_pretrained` with attention `impl`; transformers refusing it is an `incompatible` verdict."""
    try:
        return cls.from_pretrained(path, local_files_only=True, attn_implementation=impl, **config)
    except (ValueError, ImportError) as exc:
        if "attn" not in str(exc).lower() and "attention" not in str(exc).lower():
            raise
        detail = " ".join(str(exc).split())[:300]
        raise KnobUnavailable(
            f"attention={attention}: transformers refused {impl!r}: {detail}", [("attention", attention)]
        ) from None


def checkpoint_layers(model: nn.Module) -> Sequence[nn.Module]:
    """The layers transformers' own `gradient_checkpointing_enable` would recompute: every
    `GradientCheckpointingLayer`. hpo wraps these same layers itself with the same non-reentrant
    `torch.utils.checkpoint`, so the executor counts each recomputation as evidence. The model's own
    switch is not used: it recomputes only in train mode, and hpo's probe verifies the knob on a
    compared step in eval mode (dropout off), where it would be observed off. None for a model
    without such layers: checkpointing is then observed off, and a trial that asked for it is a
    mismatch."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    if not getattr(model, "supports_gradient_checkpointing", False):
        return ()
    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def cache_folder(option: str | None) -> Path:
    return Path(option or os.environ.get("HPO_CACHE_DIR") or Path.home() / ".cache" / "hpo" / "tokenized").expanduser()


def _file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cache_key(files: Sequence[str], model_path: str, settings: dict[str, Any]) -> str:
    """A key over the data files' bytes, the tokenizer files' bytes and the settings."""
    model_path = checkpoint_folder(model_path)
    tokenizer = {name: _file_digest(Path(model_path) / name) for name in TOKENIZER_FILES if (Path(model_path) / name).is_file()}
    parts = {"format": CACHE_FORMAT, "files": [_file_digest(f) for f in files], "tokenizer": tokenizer, "settings": settings}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def cached(folder: Path, key: str, build: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """(data, hit): `<folder>/<key>.pt` when present, else `build()` written there atomically."""
    path = folder / f"{key}.pt"
    if path.is_file():
        return torch.load(path, weights_only=True), True
    data = build()
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    os.close(fd)
    torch.save(data, tmp)
    os.replace(tmp, path)  # concurrent trials may both build; each writes a whole file
    return data, False


def ragged(rows: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
    """Token lists stored flat with their lengths (rows have different lengths)."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    flat = torch.tensor([t for r in rows for t in r], dtype=torch.long)
    offsets = torch.cumsum(lengths, 0) - lengths
    return {"flat": flat, "lengths": lengths, "offsets": offsets}


def pad_rows(store: dict[str, torch.Tensor], idx: torch.Tensor, pad: int, multiple: int, cap: int) -> torch.Tensor:
    """Rows `idx` of a ragged store, right-padded with `pad` to the longest row, rounded up to
    `multiple` (a compiled model then sees few shapes) but never past `cap`."""
    lengths, offsets = store["lengths"][idx], store["offsets"]
    width = min(cap, -(-int(lengths.max()) // multiple) * multiple)
    out = torch.full((len(idx), width), pad, dtype=torch.long)
    for row, (i, n) in enumerate(zip(idx.tolist(), lengths.tolist())):
        start = int(offsets[i])
        out[row, :n] = store["flat"][start : start + n]
    return out
