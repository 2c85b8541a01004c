"""A rank's place in the group: its device, the backend, and `init_process_group` over the
launcher's TCPStore with a timeout, so every collective is bounded in time."""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import os
import signal
import sys
from collections.abc import Iterator

import torch
import torch.distributed as dist

from hpo.config.trial import ParallelSettings

__all__ = ["GROUP_PREFIX", "backend_for", "connect_store", "die_with_parent", "joined_group", "quiet_threads", "rank_device"]

# The group's own keys in the launcher's store live under this prefix; the launcher's messages
# (progress, results, errors) under their own names beside it.
GROUP_PREFIX = "group"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def rank_device(device: str, rank: int) -> torch.device:
    """Rank r uses the r-th visible GPU on CUDA (each trial sees only its own slice), else the CPU."""
    wants_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return torch.device("cuda", rank) if wants_cuda else torch.device("cpu")


def backend_for(settings: ParallelSettings, device: torch.device) -> str:
    if settings.backend != "auto":
        return settings.backend
    return "nccl" if device.type == "cuda" else "gloo"


def connect_store(host: str, port: int, timeout_s: float) -> dist.TCPStore:
    """A client of the launcher's store (the launcher is its server)."""
    return dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s))


@contextlib.contextmanager
def joined_group(store: dist.Store, rank: int, world: int, settings: ParallelSettings, device: torch.device) -> Iterator[None]:
    """This process as `rank` of `world` for the block; the group is destroyed on the way out,
    also when the block raises, so its sockets close with it."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend_for(settings, device),
        store=dist.PrefixStore(GROUP_PREFIX, store),
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=settings.collective_timeout_s),
        device_id=device if device.type == "cuda" else None,
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def die_with_parent(launcher_pid: int) -> None:
    """Linux ends this rank with SIGKILL when its launcher dies, however it dies (a trial's
    deadline SIGKILLs the launcher's process): no rank trains on as an orphan."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != launcher_pid:  # the launcher died before the prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def quiet_threads() -> None:
    """One compute thread per rank: N ranks on a CPU host would otherwise each start a thread per
    core and fight over them."""
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
