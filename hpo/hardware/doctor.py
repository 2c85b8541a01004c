"""`hpo doctor`: the capability table, read from the probes in `hpo.hardware.probes`."""

from __future__ import annotations

import sys

import torch

from hpo import __version__
from hpo.hardware import probes
from hpo.knobs.attention import SDPA_KERNELS


def capability_report(device: torch.device) -> dict:
    def row(cap: probes.Capability) -> dict:
        return {"usable": cap.usable, "why": cap.why}

    low = torch.bfloat16 if probes.bf16_supported(device).usable else torch.float32
    attention = {"eager": row(probes.Capability(True)), "sdpa": row(probes.Capability(True))}
    for name, kernel in SDPA_KERNELS.items():
        attention[name] = row(probes.sdpa_kernel_runs(kernel, device, torch.float32 if device.type == "cpu" else low))
    for name in ("flash_attn", "xformers"):
        attention[name] = row(probes.package_usable(name, device))
    fused = probes.fused_adamw_runs(device)
    return {
        "device": probes.device_model(device),
        "device_type": device.type,
        "compute_capability": probes.compute_capability(device),
        "cuda_devices": torch.cuda.device_count() if probes.cuda_available() else 0,
        "torch_version": torch.__version__,
        "hpo_version": __version__,
        "python": sys.version.split()[0],
        "precision": {
            "fp32": row(probes.Capability(True)),
            "bf16": row(probes.bf16_supported(device)),
            "fp16": row(probes.fp16_supported(device)),
            "tf32": row(probes.tf32_supported(device)),
        },
        "attention": attention,
        "optimizer": {
            "forloop": row(probes.Capability(True)),
            "foreach": row(probes.Capability(True)),
            "fused": row(fused),
            "apex": row(probes.package_usable("apex", device)),
        },
    }


def format_report(report: dict) -> str:
    lines = [
        f"device        {report['device']} ({report['device_type']}, {report['cuda_devices']} CUDA devices)",
        f"software      torch {report['torch_version']}, hpo {report['hpo_version']}, python {report['python']}",
    ]
    for section in ("precision", "attention", "optimizer"):
        lines.append(f"{section}:")
        for name, cap in report[section].items():
            mark = "yes" if cap["usable"] else "no "
            lines.append(f"  {name:<16}{mark}  {cap['why']}".rstrip())
    for row in report.get("verdicts", []):
        knobs = row["knobs"] or {}
        shown = " ".join(f"{k}={v}" for k, v in knobs.items())
        lines.append(f"verdict {row['key']}  {shown}  on {row['device']}: {row['verdict']}")
    if "verdicts" in report and not report["verdicts"]:
        lines.append("no verdicts cached in this study yet")
    return "\n".join(lines)




def verdict_rows(study) -> list[dict]:
    """The study's cached verdicts: one row per knob set probed on some device."""
    from hpo.verify.cache import StudyVerdicts

    return [
        {"key": key, "verdict": record.get("verdict"), "slowdown": record.get("slowdown"),
         "knobs": record.get("knobs"), "device": record.get("device"), "probe_s": record.get("probe_s")}
        for key, record in sorted(StudyVerdicts(study).all().items())
    ]
