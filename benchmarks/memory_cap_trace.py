"""What the CPU hard cap counts while a trial runs: one `hpo train` in this process, with the
resident set, `VmData`, glibc's heap (`mallinfo2`) and the cap (`RLIMIT_DATA`) recorded at every
read of hpo's meter (after each forward). `--fixed-cap` sets the cap once, when the trial starts,
as hpo did before the cap followed the resident set (docs/memory.md, "The cap counted the heap's
freed range"); `--cap-off` leaves the meter alone to hold the limit.

    .venv/bin/python -m benchmarks.memory_cap_trace CONFIG.yaml [--fixed-cap | --cap-off] --out PATH.json
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import json
import resource
import sys
from pathlib import Path

MB = 2**20
_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


def _heap() -> dict:
    """glibc's heap in MB: obtained from the kernel (arena), in use (uordblks), free (fordblks), free at
    its top (keepcost), mapped on its own (hblkhd)."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return {name: getattr(info, name) // MB for name in ("arena", "uordblks", "fordblks", "keepcost", "hblkhd")}


def _reading() -> dict:
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM", "VmData", "RssAnon"):
                fields[name] = int(value.split()[0]) // 1024
    soft = resource.getrlimit(resource.RLIMIT_DATA)[0]
    return fields | _heap() | {"cap": None if soft == resource.RLIM_INFINITY else soft // MB}


def _instrument(reads: list[dict], fixed_cap: bool, cap_off: bool) -> None:
    from hpo.hardware import MemoryMeter, capped_process

    # The meter's module, whose own name for follow_cap --fixed-cap replaces (no face exports that name).
    memory = sys.modules[MemoryMeter.__module__]

    sample = memory.MemoryMeter.sample

    def traced(self) -> None:
        reads.append(_reading())  # before the read's own hand-back and cap: what the step left
        sample(self)

    memory.MemoryMeter.sample = traced
    if fixed_cap:  # the meter's and the hand-backs' calls; capped_process still sets it once
        memory.follow_cap = lambda counts=None: None
    if cap_off:  # the meter alone holds the limit: how far the resident set goes without the cap
        sys.modules[capped_process.__module__].cap_bytes = lambda *args: 2**50


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--fixed-cap", action="store_true", help="set the cap once at the start, as before it followed")
    parser.add_argument("--cap-off", action="store_true", help="no cap that binds: the meter alone holds the limit")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.results import run_meta
    from hpo.app.cli import main as hpo_main

    reads: list[dict] = []
    _instrument(reads, args.fixed_cap, args.cap_off)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        hpo_main(["train", str(args.config), "--json"])
    trial = json.loads(printed.getvalue())
    attrs = trial.get("user_attrs", {})
    kept = ("predicted_peak_mb", "peak_mem_mb", "memory_limit_mb", "memory_model")
    cap = "off (the meter alone)" if args.cap_off else "fixed at the start" if args.fixed_cap else "follows the resident set"
    result = {"meta": run_meta(sys.argv), "cap": cap}
    result |= {"verdict": trial.get("verdict")} | {k: attrs.get(k) for k in kept} | {"meter_reads_mb": reads}
    args.out.write_text(json.dumps(result, indent=1))
    print(
        f"{result['verdict']}; predicted {attrs.get('predicted_peak_mb')} MB, peak {attrs.get('peak_mem_mb')} MB; written {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
