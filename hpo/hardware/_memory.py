"""The one memory meter: a trial's peak memory (CUDA allocator or CPU resident set)."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

import torch

from hpo.hardware._allocator import release_freed_memory
from hpo.hardware._memory_cap import follow_cap
from hpo.hardware._statm import RESIDENT, statm_bytes

__all__ = [
    "MemoryMeter",
    "ResidentPeak",
    "enforced_limit",
    "free_memory",
    "hand_back_freed",
    "reset_resident_peak",
    "resident_bytes",
    "resident_peak_bytes",
]

# The limit this process's CPU meters enforce while inside `enforced_limit`; None: none.
_CPU_LIMIT_BYTES: int | None = None


@contextlib.contextmanager
def enforced_limit(device: torch.device, limit_bytes: int | None) -> Iterator[None]:
    """While inside, a step over `limit_bytes` fails as out of memory: on a CPU every meter's sample
    over it raises MemoryError (hpo's own meter: the resident set after forward); on CUDA the
    allocator is capped at the limit (`set_per_process_memory_fraction`) and raises
    torch.OutOfMemoryError itself."""
    global _CPU_LIMIT_BYTES
    if limit_bytes is None:
        yield
        return
    if device.type == "cuda":
        # set_per_process_memory_fraction takes an ordinal only: a bare "cuda" raised ValueError (H200, torch 2.11).
        index = torch.cuda.current_device() if device.index is None else device.index
        total = torch.cuda.mem_get_info(index)[1]
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total), index)
        try:
            yield
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, index)
        return
    previous, _CPU_LIMIT_BYTES = _CPU_LIMIT_BYTES, limit_bytes
    try:
        yield
    finally:
        _CPU_LIMIT_BYTES = previous


class MemoryMeter:
    """Peak memory of one trial. CUDA: the allocator's peak since reset. CPU: the largest resident
    set sampled at the step's high-water marks (after forward, when activations are alive), so
    it is this trial's own figure even when trials share a process (ru_maxrss never resets); a read
    over the enforced limit is taken again after the C heap hands back the freed memory it keeps."""

    def __init__(self, device: torch.device):
        self.device, self.peak_bytes = device, 0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def sample(self) -> None:
        if self.device.type != "cuda":
            resident, counts = _resident_and_counts()
            if _CPU_LIMIT_BYTES is not None and resident > _CPU_LIMIT_BYTES:
                # Freed memory the C heap keeps for the next step (`hpo.hardware.allocator`) is in the
                # resident set, and no prediction can see it: training's steps leave it behind, by a
                # different amount every run, where the peak model's steps start trimmed. Handed back
                # before the trial is judged on what it holds.
                release_freed_memory()
                resident, counts = _resident_and_counts()
            self.peak_bytes = max(self.peak_bytes, resident)
            if _CPU_LIMIT_BYTES is not None and resident > _CPU_LIMIT_BYTES:
                raise MemoryError(
                    f"resident set {resident / 2**30:.2f} GB > memory_limit_gb {_CPU_LIMIT_BYTES / 2**30:.2f} (hpo's CPU meter)"
                )
            # The hard cap is set again from this read: the heap's freed address range is not the trial's.
            follow_cap(counts)

    @property
    def peak_mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        return self.peak_bytes / 2**20


class ResidentPeak:
    """The largest resident set while inside: a CPU step's true high-water mark, where `MemoryMeter`
    reads only after forward. Under gradient checkpointing the step peaks inside backward (each
    block's recomputed activations), which the after-forward read misses: fitted to it,
    `batch_size: auto` chose a batch whose training went over the limit (docs/memory.md). Used for
    the few steps the peak model is fitted and confirmed on.

    On Linux it is the kernel's own count (`VmHWM`, reset on entry through /proc/self/clear_refs):
    every page, however briefly held. Elsewhere, or where the reset is refused, a thread samples the
    resident set every `interval_s`; a sampler the machine's load keeps off the CPU (or off the GIL)
    misses what is held between two of its reads."""

    def __init__(self, interval_s: float = 0.0005):
        self.interval_s, self.peak_bytes = interval_s, 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._kernel_counts = False

    def __enter__(self) -> ResidentPeak:
        self.peak_bytes = resident_bytes()
        self._kernel_counts = reset_resident_peak()
        if not self._kernel_counts:
            self._thread = threading.Thread(target=self._sample, name="hpo-resident-peak", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        counted = resident_peak_bytes() if self._kernel_counts else None
        self.peak_bytes = max(self.peak_bytes, resident_bytes(), counted or 0)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_bytes = max(self.peak_bytes, resident_bytes())


def reset_resident_peak() -> bool:
    """Reset the kernel's high-water mark of this process's resident set (`VmHWM`) to the resident
    set now; False where it cannot be (not Linux, a kernel before 4.0, a sandbox that refuses it)."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # 5: reset the peak resident set; 1-4 would clear the pages' referenced bits
    except OSError:
        return False
    return resident_peak_bytes() is not None


def resident_peak_bytes() -> int | None:
    """The kernel's high-water mark of this process's resident set since its last reset (`VmHWM`)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024  # in kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _resident_and_counts() -> tuple[int, list[int] | None]:
    """The resident set, with statm's counts from the same read (None off Linux), which the hard cap
    follows: one read of statm a step, not two."""
    try:
        counts = statm_bytes()
    except (OSError, ValueError, IndexError):
        return resident_bytes(), None
    return counts[RESIDENT], counts


def resident_bytes() -> int:
    """This process's resident set in bytes (on Linux; elsewhere its peak so far)."""
    try:
        return statm_bytes()[RESIDENT]
    except (OSError, ValueError, IndexError):  # not Linux: fall back to the process peak
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def free_memory(device: torch.device) -> None:
    """Collect what a finished model left behind, and on CUDA hand the cached blocks back, before
    the next model (or the next trial) is built."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def hand_back_freed(device: torch.device) -> None:
    """Hand back to the system the memory already freed, without collecting garbage: on CUDA the
    caching allocator's unused blocks, on a CPU the C heap's free pages (which the allocator keeps,
    `hpo.hardware._allocator`). After the probe, so that what it freed (the reference, the prefault
    of its timing) is not held through the training that follows: a model trained alone holds none
    of it."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    else:
        release_freed_memory()
        follow_cap()
