"""One side of `bench-vs-bare` in a process of its own: `python -m benchmarks.vs_bare_side SPEC`
prints one line, `vs-bare row: {...}`, with what `benchmarks.vs_bare_meter` measured.

The hpo side is `hpo train` on the config (`hpo.app.retrain.retrain`, the command's own code: the
executor's probe, then training), with the workload swapped for its timed twin. The bare side is
`benchmarks.bare_loop` on the same config, under the same process settings as hpo's trial
(`trial_runtime`: TF32 on CUDA, the C allocator keeping freed memory; and each process knob of the
config, cudnn.benchmark's among them, as `applied_to_process` sets it around hpo's steps), so the
ratio measures the loop and not the settings. A fresh process per side keeps resident-set figures
apart and gives each side its own CUDA context.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
import yaml

from benchmarks.bare_loop import train_bare
from benchmarks.vs_bare_meter import METER, timed_workload_name
from hpo.config.resolve import load_config
from hpo.hardware import resolve_device, trial_runtime
from hpo.hardware.probes import device_model
from hpo.knobs.systems import applied_to_process
from hpo.records import RecordKey
from hpo.runtime import preload_lazy_imports
from hpo.workloads.catalog import create_workload

__all__ = ["ROW_MARK", "SIDES", "hpo_config_file", "measure"]

ROW_MARK = "vs-bare row: "
# What the hpo side keeps of its trial's record: hpo's own figures, beside the meter's.
HPO_ATTRS = (
    RecordKey.TRAIN_SAMPLES_PER_S,
    RecordKey.STEADY_SAMPLES_PER_S,
    RecordKey.STEP_TIME_MS,
    RecordKey.PEAK_MEM_MB,
    RecordKey.PROBE_S,
    RecordKey.TRIAL_S,
    RecordKey.MFU,
    RecordKey.ACHIEVED_TFLOPS,
    RecordKey.MODEL_FLOPS_PER_SAMPLE,
    RecordKey.PEAK_TFLOPS,
    RecordKey.KNOBS_OBSERVED,
)


def hpo_config_file(config_path: Path, device: str | None, folder: Path) -> Path:
    """The config as `hpo train` reads it, its workload swapped for the timed twin."""
    raw = yaml.safe_load(config_path.read_text())
    raw["workload"]["name"] = timed_workload_name(raw["workload"]["name"])
    if device is not None:
        raw.setdefault("systems", {})["device"] = device
    path = folder / config_path.name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_hpo(config_path: Path, device: str | None) -> dict:
    from hpo.app.retrain import retrain

    with tempfile.TemporaryDirectory() as folder:
        config, outcome = retrain(hpo_config_file(config_path, device, Path(folder)))
    attrs = outcome.attrs
    device_used = str(resolve_device(config.device))  # "auto" named as what it resolved to: cuda or cpu
    return {"verdict": str(outcome.verdict), "device": device_used, "hpo": {str(k): attrs.get(k) for k in HPO_ATTRS}}


def run_bare(config_path: Path, device: str | None) -> dict:
    config = load_config(config_path)
    target = resolve_device(device or config.device)
    # torch's lazy imports, which the loop's first optimizer makes anyway, before the meter's base
    # is read, as `hpo train` imports them (`preload_lazy_imports`): each side's memory above its
    # base is then its model and loop, not when an import happened.
    preload_lazy_imports()
    workload = create_workload(timed_workload_name(config.workload), config.workload_options)
    with trial_runtime(target), applied_to_process(config.knobs.as_dict(), target.type):
        train_bare(workload, config, target)
    return {"verdict": "ok", "device": str(target)}


SIDES = {"hpo": run_hpo, "bare": run_bare}


def measure(side: str, config_path: Path, device: str | None, warmup: int) -> dict:
    """Run `side` on the config here and return its row: the meter's throughput over the steady
    steps of the training window, its memory peak, and the side's own figures."""
    row = {"side": side, **SIDES[side](config_path, device)}
    METER.finish()
    window = METER.training_window()
    on_cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    base = METER.base_cuda_bytes if on_cuda else METER.base_rss_bytes or 0
    row.update(
        {
            "device_model": device_model(resolve_device(row["device"])),
            "steps_drawn": len(window.draws),
            "samples_per_s": window.samples_per_s(warmup) if row["verdict"] == "ok" else None,
            "samples_per_cpu_s": window.samples_per_cpu_s(warmup) if row["verdict"] == "ok" and not on_cuda else None,
            "peak_mem_mb": window.peak_bytes / 2**20,
            "base_mem_mb": base / 2**20,
            "last_loss": None if window.last_loss is None else float(window.last_loss),
        }
    )
    return row


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    row = measure(spec["side"], Path(spec["config"]), spec.get("device"), spec["warmup"])
    print(ROW_MARK + json.dumps(row, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
