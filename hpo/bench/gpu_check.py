"""The knob verification matrix on this machine's accelerator (or CPU), through hpo's executor.

Every precision x attention x optimizer x checkpointing x compile combination of each workload runs
as a short trial through `hpo.trial.executor.execute`, the path a study's trial takes: the
pre-trial probe gives the verdict, the loss/gradient error against fp32/eager and the probe's timed
steps (throughput relative to the fp32/eager/for-loop reference); a combination the probe passes
then trains `steps` steps, which gives its trained throughput and peak memory.
`scripts/gpu-check` prints `markdown(rows, ...)` and writes the rows as JSON.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from hpo.config.trial import Knobs, TrainingConfig, TrialConfig
from hpo.trial.executor import execute
from hpo.verify.cache import MemoryVerdicts

__all__ = ["WORKLOAD_OPTIONS", "MatrixCheck", "check", "markdown", "matrix"]

# Small enough to probe hundreds of combinations, large enough that kernels dominate.
WORKLOAD_OPTIONS = {
    "causal_lm": {"d_model": 256, "n_layers": 4, "n_heads": 4, "seq_len": 256},
    "timeseries_classification": {},
    "text_classification": {"model": "minilm"},
}


@dataclass(frozen=True, kw_only=True)
class MatrixCheck:
    """How each combination runs; `options` overrides WORKLOAD_OPTIONS per workload name."""

    batch_size: int = 32
    steps: int = 10
    compile_backend: str = "inductor"
    device: str = "auto"
    options: dict[str, dict] = field(default_factory=dict)

    def config(self, workload: str, knobs: Knobs) -> TrialConfig:
        training = TrainingConfig(
            batch_size=self.batch_size, max_steps=self.steps, eval_every=self.steps, compile_backend=self.compile_backend
        )
        options = self.options.get(workload, WORKLOAD_OPTIONS.get(workload, {}))
        # skip_slow off: the matrix reports slow combinations with their speed instead of rejecting them.
        return TrialConfig(
            workload=workload, workload_options=options, training=training, knobs=knobs, device=self.device, skip_slow=False
        )


def matrix(precisions, attentions, optimizers, checkpointing, compiles) -> list[Knobs]:
    """Every combination; `checkpointing` holds "false"/"true", `compiles` "false" or a compile mode."""
    flags = {"false": False, "true": True}
    modes = [False if c == "false" else c for c in compiles]
    return [
        Knobs(precision=p, attention=a, optimizer=o, grad_checkpointing=flags[c], compile=m)
        for p, a, o, c, m in itertools.product(precisions, attentions, optimizers, checkpointing, modes)
    ]


def check(workload: str, knobs: Knobs, how: MatrixCheck) -> dict:
    """One combination as a trial; its own verdict store, so the probe always runs."""
    torch._dynamo.reset()  # a fresh compile per combination, as a new trial process would have
    verdicts = MemoryVerdicts()
    outcome = execute(how.config(workload, knobs), verdicts)
    probe = verdicts.get(outcome.attrs["verdict_key"]) or {}
    step_ms, slowdown = probe.get("trial_step_ms"), probe.get("slowdown")
    return {
        "workload": workload,
        "knobs": knobs.as_dict(),
        "verdict": str(outcome.verdict),
        "speedup_vs_fp32_eager": None if slowdown is None else 1 / slowdown,
        "samples_per_s": None if step_ms is None else how.batch_size * 1000 / step_ms,
        "loss_rel_err": probe.get("loss_rel_err"),
        "grad_rel_err": probe.get("grad_rel_err"),
        "observed": outcome.attrs.get("knobs_observed") or probe.get("observed"),
        "probe_s": probe.get("probe_s"),
        "train_samples_per_s": outcome.attrs.get("train_samples_per_s"),
        "peak_mem_mb": outcome.attrs.get("peak_mem_mb"),
    }


def _line(r: dict) -> str:
    k = r["knobs"]
    sps = "" if r["samples_per_s"] is None else f"{r['samples_per_s']:.0f}"
    speed = "" if r["speedup_vs_fp32_eager"] is None else f"{r['speedup_vs_fp32_eager']:.2f}"
    verdict = r["verdict"] if len(r["verdict"]) < 70 else r["verdict"][:67] + "..."
    return (
        f"| {r['workload']} | {k['precision']} | {k['attention']} | {k['optimizer']} | {k['grad_checkpointing']} "
        f"| {k['compile']} | {verdict} | {sps} | {speed} |"
    )


def markdown(rows: list[dict], device: str) -> str:
    """A table of every row, then the fastest ok combination of each workload."""
    lines = [
        f"Knob verification on {device}",
        "",
        "| workload | precision | attention | optimizer | ckpt | compile | verdict | samples/s | x fp32/eager |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_line(r) for r in rows),
    ]
    for workload in sorted({r["workload"] for r in rows}):
        ok = [r for r in rows if r["workload"] == workload and r["verdict"] == "ok" and r["samples_per_s"]]
        if ok:
            best = max(ok, key=lambda r: r["samples_per_s"])
            lines.append(
                f"\nBest on {workload}: {best['knobs']} at {best['samples_per_s']:.0f} samples/s "
                f"({best['speedup_vs_fp32_eager']:.2f}x fp32/eager)"
            )
    return "\n".join(lines)
