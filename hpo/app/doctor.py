"""`hpo doctor`: the capability table, one row per knob value in `hpo.knobs.registry`, each checked
by `hpo.verify.machine._kernel_check.check_values`, the same check that keeps a worker from proposing a value
that cannot run on its machine: a "no" here is a value no worker here proposes, and a value refused
only with some precisions says "no with precision=fp32: ..." for each."""

from __future__ import annotations

import re
import sys

import torch

from hpo import __version__
from hpo.config.schema import DEVICE_PATTERN
from hpo.errors import UserInputError
from hpo.hardware import peak_for, probes, resolve_device
from hpo.knobs.registry import PRECISION_SPECS
from hpo.study import PRUNERS, sampler_requirements
from hpo.verify.machine import CHECKED_KNOBS, MachineCheck, check_values, registry_values


def capability_report(device: torch.device) -> dict:
    """What runs on `device`: a row per knob value in the registry, plus samplers, pruners, peaks."""
    check = check_values(registry_values(), device)
    knobs = {knob: _rows(check, knob) for knob in CHECKED_KNOBS}
    knobs["precision"]["tf32"] = _row(probes.tf32_supported(device))  # a matmul mode trials turn on, not a knob value
    return {
        "device": probes.device_model(device),
        "device_type": device.type,
        "compute_capability": probes.compute_capability(device),
        "cuda_devices": torch.cuda.device_count() if probes.cuda_available() else 0,
        "torch_version": torch.__version__,
        "hpo_version": __version__,
        "python": sys.version.split()[0],
        **knobs,
        "unchecked": list(check.unchecked),
        "sampler": {r.name: {"usable": r.usable, "why": r.why} for r in sampler_requirements()},
        "pruner": {name: {"usable": True, "why": ""} for name in PRUNERS},
        "peak_tflops": _peaks(device),
        "machine_facts": machine_facts(),
    }


def machine_facts() -> dict:
    """What this machine keeps from earlier probes (`hpo.verify.stored._machine_facts`): one row per stored
    combination of a model, batch and software, with its verdict and step times."""
    from hpo.verify.stored import MachineFacts

    store = MachineFacts()
    return {"folder": str(store.directory), "entries": [_fact_row(entry) for entry in store.entries()]}


def _fact_row(entry: dict) -> dict:
    facts, speed = entry.get("facts") or {}, entry.get("speed") or {}
    return {
        "key": entry["key"],
        "workload": facts.get("workload"),
        "knobs": facts.get("knobs"),
        "device": facts.get("device"),
        "torch": (facts.get("versions") or {}).get("torch"),
        "batch_size": speed.get("batch_size"),
        "verdict": (entry.get("verdict") or {}).get("verdict"),
        "speed": speed.get("verdict"),
        "step_ms": speed.get("trial_step_ms"),
        # step_ms is a lower bound: the step was stopped past the slow limit.
        "step_stopped": bool(speed.get("trial_step_stopped")),
        "raced_ms": entry.get("raced_ms"),
        "at": entry.get("at"),
    }


def device_from_flag(name: str) -> torch.device:
    """`--device NAME` as a torch device, or a UserInputError naming the names it takes."""
    if not re.match(DEVICE_PATTERN, name):
        raise UserInputError(f"--device {name}: not a device name; use auto, cpu, mps, cuda or cuda:N")
    return resolve_device(name)


def _row(cap: probes.Capability) -> dict:
    return {"usable": cap.usable, "why": cap.why}


def _rows(check: MachineCheck, knob: str) -> dict:
    """A row per value: usable or not and why; `not_with` the precisions it is refused with, if any."""
    rows = {}
    for value in registry_values()[knob]:
        why = check.value_why(knob, value)
        row = {"usable": why is None, "why": why if why is not None else check.remarks.get((knob, value), "")}
        pairs = check.pairs_with(knob, value)
        if pairs:
            row["not_with"] = {"precision": pairs}
            row["why"] = "; ".join([row["why"]] * bool(row["why"]) + [f"no with precision={p}: {w}" for p, w in pairs.items()])
        rows[value] = row
    return rows


def _peaks(device: torch.device) -> dict:
    """MFU's denominators here: published for known GPUs, measured (and cached) on a CPU."""
    rows = {}
    for precision in PRECISION_SPECS:
        peak = peak_for(device, precision, probes.device_model(device))
        rows[precision] = None if peak is None else {"tflops": round(peak.tflops, 4), "source": peak.source}
    return rows


def format_report(report: dict) -> str:
    lines = [
        f"device        {report['device']} ({report['device_type']}, {report['cuda_devices']} CUDA devices)",
        f"software      torch {report['torch_version']}, hpo {report['hpo_version']}, python {report['python']}",
        *_capability_lines(report),
        "peak TFLOP/s (MFU's denominator):",
        *_peak_lines(report["peak_tflops"]),
        *_machine_fact_lines(report.get("machine_facts") or {"folder": "?", "entries": []}),
        *_verdict_lines(report),
    ]
    return "\n".join(lines)


def _capability_lines(report: dict) -> list[str]:
    """Each knob's values, samplers and pruners: usable or not, and why; then what was not checked."""
    lines = []
    for section in (*CHECKED_KNOBS, "sampler", "pruner"):
        lines.append(f"{section}:")
        for name, cap in report[section].items():
            mark = "yes" if cap["usable"] else "no "
            lines.append(f"  {name:<20}{mark}  {cap['why']}".rstrip())
    return lines + [f"unchecked: {line}" for line in report.get("unchecked", ())]


def _peak_lines(peaks: dict) -> list[str]:
    return [
        f"  {precision:<20}" + ("unknown for this device" if peak is None else f"{peak['tflops']:g}  {peak['source']}")
        for precision, peak in peaks.items()
    ]


def _machine_fact_lines(stored: dict) -> list[str]:
    lines = [f"machine facts {len(stored['entries'])} stored in {stored['folder']} (`hpo probe --fresh` ignores them)"]
    for row in stored["entries"]:
        knobs = " ".join(f"{k}={v}" for k, v in (row["knobs"] or {}).items())
        step = "" if row["step_ms"] is None else f", {row['step_ms']:.3g} ms/step at batch {row['batch_size']}"
        lines.append(f"  {row['workload']} {knobs} torch {row['torch']}: {row['speed'] or row['verdict']}{step}")
    return lines


def _verdict_lines(report: dict) -> list[str]:
    """The study's cached knob verdicts, with `--study`."""
    lines = []
    for row in report.get("verdicts", []):
        shown = " ".join(f"{k}={v}" for k, v in (row["knobs"] or {}).items())
        lines.append(f"verdict  {shown}  on {row['device']}: {row['verdict']}")
    if "verdicts" in report and not report["verdicts"]:
        lines.append("no verdicts cached in this study yet")
    return lines


def verdict_rows(study) -> list[dict]:
    """The study's cached verdicts, one knob row (`hpo.app.output`) per knob set probed on some device."""
    from hpo.app.output import knob_row_json
    from hpo.verify.stored import StudyVerdicts

    return [knob_row_json({**record, "cached": True}) for _, record in sorted(StudyVerdicts(study).all().items())]
