"""`systems.parallel` requests that cannot be met, refused when the file is read (`hpo validate`,
`run`, `train`), each in one line that names the key, the value and the fix. Torch-free: the visible
GPUs are counted from CUDA_VISIBLE_DEVICES when it is set; the launch counts them again with torch."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

from hpo.config.params import AutoBatch, Choices, Fixed, IntRange, ParamSpec
from hpo.config.schema import ParallelSpec, SpaceFile
from hpo.errors import UserInputError
from hpo.workloads.catalog import trainer_of

__all__ = ["check_parallel", "gpus_shown", "visible_cuda_devices"]

# One folder per GPU (named by its PCI address) while NVIDIA's driver is loaded.
NVIDIA_GPUS = "/proc/driver/nvidia/gpus"


def visible_cuda_devices() -> int | None:
    """The number of GPUs CUDA_VISIBLE_DEVICES leaves visible, as CUDA reads it: its leading entries
    up to the first empty or negative one; None when it is not set."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    shown = 0
    for entry in value.split(","):
        if not entry.strip() or entry.strip().startswith("-"):
            break
        shown += 1
    return shown


def gpus_shown() -> tuple[int, str] | None:
    """How many GPUs this host gives a trial's ranks, and who says so: CUDA_VISIBLE_DEVICES when
    it is set, else NVIDIA's driver; None when neither tells (validate imports no torch to ask)."""
    listed = visible_cuda_devices()
    if listed is not None:
        return listed, "CUDA_VISIBLE_DEVICES shows"
    if os.path.isdir(NVIDIA_GPUS):
        return len(os.listdir(NVIDIA_GPUS)), "the NVIDIA driver shows"
    return None


def check_parallel(spec: SpaceFile, params: dict[str, ParamSpec], where: Callable[[str], str]) -> None:
    parallel = spec.systems.parallel
    if parallel is None:
        return
    _check_devices(parallel, spec.systems.device, where)
    _check_not_yet(spec, where)
    _check_lightning_strategy(spec, where)
    if "batch_size" in params:
        _check_batch(parallel.processes, params["batch_size"], where("params.batch_size"))


def _check_devices(parallel: ParallelSpec, device: str, where: Callable[[str], str]) -> None:
    shown = gpus_shown()
    on_cpu = device == "cpu" or (device == "auto" and shown is not None and shown[0] == 0)
    if parallel.backend == "nccl" and on_cpu:
        got = "cpu" if device == "cpu" else f"auto where {shown[1]} no GPU"
        raise UserInputError(
            f"{where('systems.parallel.backend')}: nccl runs collectives on CUDA devices, got systems.device {got}; "
            "use backend gloo (or auto)"
        )
    if on_cpu or not device.startswith(("cuda", "auto")) or shown is None:
        return  # a CPU trial, or GPUs this torch-free check cannot count (the launch counts them with torch)
    _check_gpu_count(parallel.processes, *shown, where("systems.parallel.processes"))


def _check_gpu_count(n: int, visible: int, who: str, where_key: str) -> None:
    """Each worker's trials take n GPUs of its own: n must fit in, and divide, the visible GPUs."""
    if n > visible:
        raise UserInputError(
            f"{where_key}: {n} ranks need as many GPUs, {who} {visible}; lower processes or make more GPUs visible"
        )
    if visible % n:
        fits = [d for d in range(1, visible + 1) if visible % d == 0]
        raise UserInputError(
            f"{where_key}: each worker runs trials of {n} ranks on its own {n} GPUs, and {n} does not divide the "
            f"{visible} {who.removesuffix(' shows')} shows ({visible % n} would sit idle); use processes in {fits} "
            f"or make a multiple of {n} GPUs visible"
        )


def _check_not_yet(spec: SpaceFile, where: Callable[[str], str]) -> None:
    """What hpo's parallel trials do not do yet: refused, never run as something else."""
    workload = spec.workload
    unsupported = {"workload.budget_s": workload.budget_s, "workload.target": workload.target}
    for key, value in unsupported.items():
        if value is not None:
            raise UserInputError(
                f"{where(key)}: {value!r} is not supported with systems.parallel yet; remove it or run one process"
            )


def _check_lightning_strategy(spec: SpaceFile, where: Callable[[str], str]) -> None:
    """hpo's `fsdp` is FSDP2 (`fully_shard`). Lightning 2.6's `FSDPStrategy` is FSDP1 and refuses a
    CPU accelerator; its FSDP2 `ModelParallelStrategy` shards only in the module's own
    `configure_model`. Neither runs what `fsdp` means, so a Lightning workload's trial runs DDP only."""
    if "fsdp" in spec.systems.parallel.choices()["strategy"] and trainer_of(spec.workload.name) == "lightning":
        raise UserInputError(
            f"{where('systems.parallel.strategy')}: 'fsdp' is FSDP2 (fully_shard), which Lightning's Trainer does not "
            f"apply to a module (its FSDPStrategy is FSDP1 and needs CUDA; ModelParallelStrategy needs the module's own "
            f"configure_model); use strategy ddp for workload {spec.workload.name!r}, or an hpo-loop workload for fsdp"
        )


def _check_batch(processes: int, batch: ParamSpec, path: str) -> None:
    """The batch is the global batch: every value must split evenly over the ranks."""
    if isinstance(batch, AutoBatch):
        _check_auto_batch(processes, batch, path)
        return
    if isinstance(batch, Fixed | Choices):
        values = [batch.value] if isinstance(batch, Fixed) else list(batch.choices)
        uneven = [v for v in values if v % processes]
    elif isinstance(batch, IntRange):
        step = batch.step or 1
        uneven = [] if batch.low % processes == 0 and step % processes == 0 and not batch.log else [batch.low]
    else:
        return
    if uneven:
        raise UserInputError(
            f"{path}: the global batch must divide over systems.parallel.processes {processes}, "
            f"got {uneven[0]}; use multiples of {processes} (a range: low and step multiples of it, not log)"
        )


def _check_auto_batch(processes: int, auto: AutoBatch, path: str) -> None:
    """`batch_size: auto`'s `max` and `multiple_of` bound the global batch, which also splits over
    the ranks: it is a multiple of lcm(multiple_of, processes), and `max` must allow one."""
    smallest = math.lcm(auto.multiple_of, processes)
    if auto.max < smallest:
        raise UserInputError(
            f"{path}: auto's max {auto.max} is below the smallest global batch that is a multiple of multiple_of "
            f"{auto.multiple_of} and splits over systems.parallel.processes {processes}, {smallest}; "
            f"raise max to {smallest} or more"
        )
