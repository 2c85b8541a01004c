"""The knob verification matrix on this machine's accelerator (or CPU), through hpo's executor.

Every precision x attention x optimizer x checkpointing x compile combination of each workload runs
as a short trial through `hpo.trial._executor.execute`, the path a study's trial takes: the
pre-trial probe gives the verdict, the loss/gradient error against fp32/eager and the probe's timed
steps (throughput relative to the fp32/eager/for-loop reference); a combination the probe passes
then trains `steps` steps, which gives its trained throughput and peak memory.

`run_matrix` runs each combination in a fresh process (`python -m hpo.app.gpu_check SPEC`), so a
sticky CUDA error, an out-of-memory or a crash costs that combination only, and appends its row to
a JSON Lines file as soon as it is known; run again, it skips the combinations already in the file.
`hpo gpu-check` is its command line (`check_here`); docs/gpu-readiness.md documents the row format.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from hpo import torch_compat
from hpo.app.gpu_check_table import markdown
from hpo.config.trial import Knobs, TrainingConfig, TrialConfig
from hpo.hardware import resolve_device
from hpo.hardware.probes import device_model
from hpo.knobs.systems import TRIAL_KNOBS
from hpo.logging import get_logger
from hpo.records import RecordKey
from hpo.trial import execute
from hpo.verify.stored import MemoryVerdicts, speed_key

__all__ = [
    "WORKLOAD_OPTIONS",
    "MatrixCheck",
    "check",
    "check_here",
    "check_in_child",
    "markdown",
    "matrix",
    "read_rows",
    "row_key",
    "run_matrix",
]

_log = get_logger(__name__)

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


def choices_from_flags(texts: dict[str, list[str]]) -> dict[str, list]:
    """Each knob's values from gpu-check's flags (`--precision bf16 fp32` as {"--precision": [...]});
    a knob whose flag is absent takes the values gpu-check runs by default."""
    choices = {}
    for name, knob in TRIAL_KNOBS.items():
        default = knob.values if knob.gpu_check_values is None else knob.gpu_check_values
        given = texts.get(knob.flag)
        choices[name] = list(default) if given is None else [knob.from_cli(text) for text in given]
    return choices


def matrix(choices: dict[str, list]) -> list[Knobs]:
    """Every combination of each knob's values in `choices`."""
    names = list(choices)
    return [Knobs(**dict(zip(names, values, strict=True))) for values in itertools.product(*choices.values())]


def check(workload: str, knobs: Knobs, how: MatrixCheck) -> dict:
    """One combination as a trial; its own verdict store, so the probe always runs."""
    torch_compat.reset_compiled_graphs()  # a fresh compile per combination, as a new trial process would have
    verdicts = MemoryVerdicts()
    outcome = execute(how.config(workload, knobs), verdicts)
    key = outcome.attrs[RecordKey.VERDICT_KEY]
    probe = verdicts.get(key) or {}
    speed = verdicts.get(speed_key(key, how.batch_size)) or {}  # the speed fact at this batch size
    return {
        "workload": workload,
        "knobs": knobs.as_dict(),
        "verdict": str(outcome.verdict),
        **_probe_columns(probe, speed, how.batch_size),
        "observed": outcome.attrs.get(RecordKey.KNOBS_OBSERVED) or probe.get("observed"),
        "probe_s": probe.get("probe_s"),
        **_trained_columns(outcome.attrs),
    }


def _probe_columns(probe: dict, speed: dict, batch_size: int) -> dict:
    """What the probe measured: the speed of its timed steps against fp32/eager, and its numeric errors."""
    step_ms, slowdown = speed.get("trial_step_ms"), speed.get("slowdown")
    return {
        "speedup_vs_fp32_eager": None if slowdown is None else 1 / slowdown,
        "samples_per_s": None if step_ms is None else batch_size * 1000 / step_ms,
        "loss_rel_err": probe.get("loss_rel_err"),
        "grad_rel_err": probe.get("grad_rel_err"),
        "grad_floor": probe.get("grad_floor"),
        "grad_bound": probe.get("grad_bound"),
    }


def _trained_columns(attrs: dict) -> dict:
    """What training the combination recorded: its throughput and peak memory."""
    return {
        "train_samples_per_s": attrs.get(RecordKey.TRAIN_SAMPLES_PER_S),
        "steady_samples_per_s": attrs.get(RecordKey.STEADY_SAMPLES_PER_S),  # like with like beside samples_per_s
        "peak_mem_mb": attrs.get(RecordKey.PEAK_MEM_MB),
    }


# ---- one process per combination, rows appended as they come, resumable --------------------

ROW_MARK = "gpu-check row: "  # the child's stdout line that carries its row
KEY_FIELDS = ("workload", "knobs", "batch_size", "steps", "compile_backend", "device", "torch")


def row_key(row: dict) -> str:
    """What identifies a combination's row: the combination, how it ran, and on what."""
    return json.dumps({name: row.get(name) for name in KEY_FIELDS}, sort_keys=True, default=str)


def read_rows(path: Path) -> list[dict]:
    """The rows of a JSON Lines file; a last line cut short by a crash is ignored."""
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def _append(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()


def _crashed_row(workload: str, knobs: Knobs, detail: str) -> dict:
    return {"workload": workload, "knobs": knobs.as_dict(), "verdict": f"crashed: {detail}"}


def check_in_child(workload: str, knobs: Knobs, how: MatrixCheck, timeout_s: float) -> dict:
    """`check` in a fresh Python process: its CUDA context, errors and memory die with it."""
    spec = json.dumps({"workload": workload, "knobs": knobs.as_dict(), "how": dataclasses.asdict(how)})
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "hpo.app.gpu_check", spec], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return _crashed_row(workload, knobs, f"no result within {timeout_s:.0f} s")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(ROW_MARK):
            return json.loads(line.removeprefix(ROW_MARK))
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
    return _crashed_row(workload, knobs, f"exit {proc.returncode}: {last}")


def run_matrix(
    path: Path,
    workloads: Iterable[str],
    combos: list[Knobs],
    how: MatrixCheck,
    meta: dict,
    *,
    timeout_s: float = 1800.0,
    stamp: dict | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> list[dict]:
    """Every (workload, combination) not yet in `path`, each in a fresh process, its row appended
    as soon as it is known, with how it ran, `meta` (part of what identifies a row: device, torch)
    and `stamp` (recorded only, such as the date). Returns every row in the file."""
    done = {row_key(row) for row in read_rows(path)}
    settings = {"batch_size": how.batch_size, "steps": how.steps, "compile_backend": how.compile_backend}
    for workload in workloads:
        for index, knobs in enumerate(combos, 1):
            labels = {"workload": workload, "knobs": knobs.as_dict(), **settings, **meta}
            if row_key(labels) in done:
                log(f"[{workload} {index}/{len(combos)}] {knobs.as_dict()} -> already in {path.name}")
                continue
            row = {**check_in_child(workload, knobs, how, timeout_s), **labels, **(stamp or {})}
            _append(path, row)
            log(f"[{workload} {index}/{len(combos)}] {knobs.as_dict()} -> {row['verdict']}")
    return read_rows(path)


def check_here(out_dir: Path, workloads: Iterable[str], combos: list[Knobs], how: MatrixCheck, timeout_s: float) -> str:
    """The matrix on `how.device`: rows in `out_dir/gpu-<device>.jsonl` (resumed if it exists), the
    markdown table of every row beside it (.md). Returns the table."""
    name = device_model(resolve_device(how.device))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"gpu-{re.sub(r'[^A-Za-z0-9]+', '-', name).strip('-').lower()}.jsonl"
    meta = {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda}
    stamp = {"date": str(datetime.date.today())}
    rows = run_matrix(path, workloads, combos, how, meta, timeout_s=timeout_s, stamp=stamp, log=_log.info)
    table = markdown(rows, f"{name}, torch {torch.__version__}")
    path.with_suffix(".md").write_text(table + "\n")
    _log.info(f"rows in {path}, table in {path.with_suffix('.md')}")
    return table


def _child(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    row = check(spec["workload"], Knobs(**spec["knobs"]), MatrixCheck(**spec["how"]))
    print(ROW_MARK + json.dumps(row, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
