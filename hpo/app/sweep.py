"""`hpo probe SPACE.yaml`: probe every combination of the file's systems knobs on this machine,
for the file's model, without training, and rank them by measured throughput.

Searched hyperparameters are taken at one documented value each
(`hpo.config.resolve.representative_values`): a fixed value as it is, the middle of a range (the
geometric middle of a log range, rounded for integers and steps), the first of a list of choices. Every verdict goes into the verdict cache, the study's when `--study` names
one, so a later `hpo run` of that study starts from them: its trials reuse the verdicts, and the
sampler never proposes a combination, or a part of one, known to fail.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from dataclasses import dataclass

import torch

from hpo.config.resolve import build_config, representative_values
from hpo.config.space import SearchSpace
from hpo.config.trial import Knobs, TrialConfig
from hpo.errors import error_verdict, short_traceback
from hpo.hardware.runtime import resolve_device, trial_runtime
from hpo.trial.executor import cached_verdict
from hpo.verdicts import Verdict
from hpo.verify.cache import VerdictStore, reference_key, speed_key, verdict_key
from hpo.verify.compared import ReferenceFiles
from hpo.verify.known_failures import is_sticky_device_error
from hpo.verify.probe import run_probe
from hpo.workloads.registry import create_workload

__all__ = ["SweepRow", "combinations", "sweep", "table"]


@dataclass
class SweepRow:
    knobs: dict
    verdict: str
    samples_per_s: float | None
    slowdown: float | None
    peak_mem_mb: float | None
    loss_rel_err: float | None
    grad_rel_err: float | None
    cached: bool

    def as_json(self) -> dict:
        return {k: getattr(self, k) for k in ("knobs", "verdict", "samples_per_s", "slowdown", "peak_mem_mb")}


def combinations(space: SearchSpace) -> list[Knobs]:
    names = list(space.systems)
    return [Knobs(**dict(zip(names, values, strict=True))) for values in itertools.product(*space.systems.values())]


def sweep(space: SearchSpace, store: VerdictStore, on_row=None) -> list[SweepRow]:
    """Probe every knob combination; rows ranked by samples/s (verdicts that did not pass last)."""
    values = representative_values(space)
    configs = [build_config(space, values, knobs) for knobs in combinations(space)]
    device = resolve_device(configs[0].device)
    workload = create_workload(configs[0].workload, configs[0].workload_options)
    workload.bind_training(configs[0].training.params())
    rows = []
    with trial_runtime(device), tempfile.TemporaryDirectory(prefix="hpo-reference-") as folder:
        references = ReferenceFiles(folder)  # the reference's compared step runs once, not once a combination
        for config in configs:
            rows.append(_probe_one(workload, config, device, store, references))
            if on_row is not None:
                on_row(rows[-1])
    # The reference's own step time is known once any other combination was timed against it.
    reference_ms = (store.get(reference_key(configs[0], device)) or {}).get("step_ms")
    for row, config in zip(rows, configs, strict=True):
        if row.samples_per_s is None and row.slowdown is not None and reference_ms and Verdict.parse(row.verdict).ok:
            row.samples_per_s = 1000 * config.training.batch_size / (reference_ms * row.slowdown)
    return sorted(rows, key=lambda r: (r.samples_per_s is None, -(r.samples_per_s or 0.0)))


def _probe_one(workload, config: TrialConfig, device: torch.device, store: VerdictStore, references: ReferenceFiles) -> SweepRow:
    key, facts = verdict_key(config, device)
    batch_size = config.training.batch_size
    record, speed = store.get(key), store.get(speed_key(key, batch_size))
    cached = record is not None and (speed is not None or not cached_verdict(record).ok)
    if not cached:
        try:
            probe = run_probe(workload, config, device, store, references=references)
        except Exception as exc:
            if is_sticky_device_error(exc):
                raise
            print(
                f"hpo probe: {config.knobs.as_dict()} failed with an error (not a verdict):\n{short_traceback(exc)}",
                file=sys.stderr,
            )
            return SweepRow(config.knobs.as_dict(), str(error_verdict(exc)), None, None, None, None, None, cached=False)
        record = {**probe.record(), "knobs": facts["knobs"], "device": facts["device"]}
        store.add(key, record)
        speed = probe.speed_record(batch_size)
        if speed is not None:
            store.add(speed_key(key, batch_size), speed)
    verdict = cached_verdict(record)
    if verdict.ok and speed is not None:
        verdict = cached_verdict(speed)
    step_ms = (speed or {}).get("trial_step_ms")
    ok = verdict.ok
    return SweepRow(
        knobs=config.knobs.as_dict(),
        verdict=str(verdict),
        samples_per_s=1000 * batch_size / step_ms if ok and step_ms else None,
        slowdown=(speed or {}).get("slowdown"),
        peak_mem_mb=record.get("peak_mem_mb"),
        loss_rel_err=record.get("loss_rel_err"),
        grad_rel_err=record.get("grad_rel_err"),
        cached=cached,
    )


def table(rows: list[SweepRow]) -> str:
    head = [
        "precision",
        "attention",
        "optimizer",
        "ckpt",
        "compile",
        "samples/s",
        "x fp32",
        "peak MB",
        "loss err",
        "grad err",
        "verdict",
    ]
    body = [
        [str(r.knobs[k]) for k in ("precision", "attention", "optimizer", "grad_checkpointing", "compile")]
        + [_fmt(r.samples_per_s, "{:.1f}"), _fmt(r.slowdown, "{:.2f}"), _fmt(r.peak_mem_mb, "{:.0f}")]
        + [_fmt(r.loss_rel_err, "{:.1e}"), _fmt(r.grad_rel_err, "{:.1e}"), r.verdict[:70]]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [head, *body])


def _fmt(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
