"""`hpo export --as python -o SCRIPT.py` of a trial that ran as N ranks: the `torchrun` command that
starts N ranks of the script, written beside it as `SCRIPT.torchrun.sh`. What each rank must do to
run as the trial's ranks did (join the group, wrap the model with the strategy's knobs, train on its
rows of each global batch) is said in its comment lines, with the dtypes the trial's wire carried."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import optuna

from hpo.app.export_as.winner import Winner
from hpo.knobs.registry import PRECISION_SPECS
from hpo.records import RecordKey

__all__ = ["torchrun_script", "write_torchrun"]

SUFFIX = ".torchrun.sh"


def write_torchrun(trial: optuna.trial.FrozenTrial, w: Winner, script: Path) -> list[Path]:
    """The command file written beside `script`, as a list; empty when the trial ran as one process."""
    text = torchrun_script(trial, w, script.name)
    if text is None:
        return []
    path = script.with_name(script.stem + SUFFIX)
    path.write_text(text)
    path.chmod(0o755)
    return [path]


def torchrun_script(trial: optuna.trial.FrozenTrial, w: Winner, script_name: str) -> str | None:
    """A shell script that runs `script_name` as the trial's ranks; None without `systems.parallel`."""
    attrs = trial.user_attrs
    config = attrs.get(RecordKey.CONFIG) or {}
    parallel = config.get("systems", {}).get("parallel")
    if not parallel:
        return None
    n = parallel["processes"]
    backend = _backend(parallel, on_cpu=str(attrs.get(RecordKey.DEVICE, "cpu")).startswith("cpu"))
    lines = [
        "#!/bin/sh",
        f"# hpo trial {trial.number} ran as {n} ranks of one torch.distributed group ({backend}); torchrun starts them.",
        f"# Before train(), each rank of {script_name} joins the group and wraps its model as the trial did:",
        f"#   torch.distributed.init_process_group({backend!r}, timeout=datetime.timedelta(seconds={parallel['collective_timeout_s']:g}))",
        *_wrap_lines(parallel, attrs.get(RecordKey.PARALLEL) or {}),
        *_rows_lines(int(config["params"]["batch_size"]), n),
        *_sharded_train_lines(w),
        f'exec torchrun --standalone --nnodes=1 --nproc_per_node={n} {shlex.quote(script_name)} "$@"',
        "",
    ]
    return "\n".join(lines)


def _rows_lines(batch: int, n: int) -> list[str]:
    """Which rows of each global batch a rank trains on, as the trial's ranks did."""
    return [
        f"# and trains on rows [rank * {batch // n}, (rank + 1) * {batch // n}) of each global batch of {batch}",
        "# (every rank draws the same global batch: seed its sampler alike).",
    ]


def _backend(parallel: dict[str, Any], on_cpu: bool) -> str:
    """The process group's backend the trial ran: `auto` is gloo on CPU, nccl on CUDA."""
    backend = parallel.get("backend", "auto")
    return ("gloo" if on_cpu else "nccl") if backend == "auto" else backend


def _wrap_lines(parallel: dict[str, Any], seen: dict[str, Any]) -> list[str]:
    if parallel["strategy"] == "ddp":
        return [
            "#   model = torch.nn.parallel.DistributedDataParallel(model, "
            f"bucket_cap_mb={parallel['bucket_cap_mb']:g}, gradient_as_bucket_view={parallel['gradient_as_bucket_view']})",
        ]
    return _fsdp_lines(parallel, seen)


def _fsdp_lines(parallel: dict[str, Any], seen: dict[str, Any]) -> list[str]:
    """How each rank shards its model, with the mixed-precision policy the wire's dtypes showed."""
    params, reduced = _one_dtype(seen.get("param_dtypes_seen")), _one_dtype(seen.get("reduce_dtypes_seen"))
    reshard = f"reshard_after_forward={parallel['reshard_after_forward']}"
    if params is None or reduced is None:  # never a policy the wire did not show
        return [
            f"#   torch.distributed.fsdp.fully_shard(block, {reshard}) for each block, then on the model; the trial's "
            "record shows no single parameter and reduce dtype on the wire: its MixedPrecisionPolicy is not known",
        ]
    policy = f"MixedPrecisionPolicy(param_dtype=torch.{params}, reduce_dtype=torch.{reduced})"
    sharded = f"mp_policy={policy}, {reshard}"
    lines = [
        f"#   torch.distributed.fsdp.fully_shard(block, {sharded}) for each block, then",
        f"#   torch.distributed.fsdp.fully_shard(model, {sharded}); its parameters gathered in {params}, "
        f"gradients reduced in {reduced} (seen on the wire)",
    ]
    if params != "float32":  # hpo's FSDP2 ranks run no autocast: the policy casts
        lines.append("#   the policy is the precision: train() enters no autocast region")
    return lines


def _sharded_train_lines(w: Winner) -> list[str]:
    """What train() itself does under FSDP2 as the trial's ranks did, which it cannot do alone."""
    lines = []
    if w.sharded and PRECISION_SPECS[w.knobs["precision"]].scaled:
        lines.append("# train() scales the loss with ShardedGradScaler: every rank skips an overflowing step together")
    if w.sharded and w.knobs["compile"]:
        lines.append("# train() compiles each fully_shard-ed block's forward (the trial's ranks compiled no sharded root)")
    return lines


def _one_dtype(dtypes: list[str] | None) -> str | None:
    return dtypes[0] if dtypes and len(dtypes) == 1 else None
