"""Each systems knob against the fp32 / eager / for-loop baseline, side by side.

Every config trains the same workload through hpo's own executor (probe, then train), so the
verdicts are the ones a study would record. Configs are interleaved across repeats (A B C A B C)
and medians are reported, because these machines are noisy. Also measures the verification
overhead: the probe's share of a default trial and the cost of a cached-verdict lookup.
`scripts/bench-knobs` prints `table(result)` and writes `result` as JSON.
"""

from __future__ import annotations

import datetime
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from benchmarks.host import cpu_info
from benchmarks.saved_memory import saved_activations, tensor_bytes
from hpo.config.trial import Knobs, TrainingConfig, TrialConfig
from hpo.engine import AssembledModel
from hpo.errors import UserInputError
from hpo.hardware import resolve_device, seed_everything
from hpo.hardware.probes import bf16_supported, device_model
from hpo.runtime import preload_lazy_imports
from hpo.trial import TrialOutcome, execute
from hpo.verify.stored import MemoryVerdicts, verdict_key
from hpo.workloads.catalog import create_workload

__all__ = ["BASELINE", "CONFIGS", "KnobsBench", "run_knobs", "selected"]

BASELINE = {"precision": "fp32", "attention": "eager", "optimizer": "forloop"}
# Name -> the knobs changed from BASELINE: each single knob, then a few combinations.
CONFIGS = {
    "baseline": {},
    "sdpa": {"attention": "sdpa"},
    "foreach": {"optimizer": "foreach"},
    "fused": {"optimizer": "fused"},
    "bf16": {"precision": "bf16"},
    "fp16": {"precision": "fp16"},
    "ckpt": {"grad_checkpointing": True},
    "compile": {"compile": "default"},
    "bf16+fused": {"precision": "bf16", "optimizer": "fused"},
    "bf16+sdpa+fused": {"precision": "bf16", "attention": "sdpa", "optimizer": "fused"},
    "fp16+fused": {"precision": "fp16", "optimizer": "fused"},
}
MEM_CPU = (
    "peak mem = params + grads + optimizer state + peak live autograd-saved activations in one step "
    "(benchmarks.saved_memory; excludes temporaries and the interpreter)"
)
MEM_CUDA = "peak mem = torch.cuda.max_memory_allocated over the training loop"


@dataclass(frozen=True, kw_only=True)
class KnobsBench:
    """What to benchmark; `scripts/bench-knobs` fills it from its flags."""

    workload: str = "causal_lm"
    options: dict = field(default_factory=dict)
    steps: int = 40
    batch_size: int = 32
    repeats: int = 3
    configs: tuple[str, ...] = tuple(CONFIGS)
    device: str = "auto"
    compile_backend: str = "aot_eager"
    skip_slow: bool = True
    overhead_steps: int = TrainingConfig().max_steps

    def __post_init__(self):
        unknown = [n for n in self.configs if n not in CONFIGS]
        if unknown or "baseline" not in self.configs:
            raise UserInputError(
                f"configs must name known configs and include 'baseline' (the ratios' base), got {list(self.configs)}; "
                f"choose from {', '.join(CONFIGS)}"
            )


def selected(spec: str | None) -> tuple[str, ...]:
    """The configs named in a comma-separated list, baseline first and always."""
    names = [n.strip() for n in spec.split(",") if n.strip()] if spec else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise UserInputError(f"--configs: unknown config {unknown[0]!r}; choose from {', '.join(CONFIGS)}")
    return ("baseline", *(n for n in dict.fromkeys(names) if n != "baseline"))


def knobs_of(name: str) -> Knobs:
    return Knobs(**{**BASELINE, **CONFIGS[name]})


def trial_config(bench: KnobsBench, knobs: Knobs, steps: int, eval_every: int | None = None) -> TrialConfig:
    training = TrainingConfig(
        batch_size=bench.batch_size, max_steps=steps, eval_every=eval_every or steps, compile_backend=bench.compile_backend
    )
    return TrialConfig(
        workload=bench.workload,
        workload_options=bench.options,
        training=training,
        knobs=knobs,
        device=bench.device,
        skip_slow=bench.skip_slow,
    )


def cpu_peak_mem_mb(config: TrialConfig, device: torch.device) -> float:
    """Params, grads and optimizer state after one warm-up step (it creates the state and compiles),
    plus the peak autograd-saved activations of one more step (`benchmarks.saved_memory`)."""
    seed_everything(config.seed)
    assembled = AssembledModel(create_workload(config.workload, config.workload_options), config.knobs, config.training, device)
    batch = assembled.move(next(assembled.workload.train_batches(config.training.batch_size, config.seed)))
    assembled.forward_backward(batch)
    assembled.optimizer_step()
    params = list(assembled.model.parameters())
    with saved_activations(exclude=params) as saved:
        assembled.forward_backward(batch)
    state = [t for s in assembled.optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    held = tensor_bytes(params + [p.grad for p in params if p.grad is not None] + state)
    return (held + saved.peak) / 2**20


def _progress(line: str) -> None:
    print(line, file=sys.stderr)


def run_configs(
    bench: KnobsBench, device: torch.device, log: Callable[[str], None], on_round: Callable[[dict[str, dict]], None] | None = None
) -> dict[str, dict]:
    """Every config once per round, interleaved; `on_round` gets the rows so far after each round."""
    verdicts, runs, cpu_mem = MemoryVerdicts(), {name: [] for name in bench.configs}, {}
    execute(trial_config(bench, Knobs(**BASELINE), 3), MemoryVerdicts())  # untimed warm-up
    rows = {}
    for r in range(bench.repeats):
        for name in bench.configs:  # interleaved: every config once per round
            outcome = execute(trial_config(bench, knobs_of(name), bench.steps), verdicts)
            runs[name].append(outcome)
            speed = outcome.attrs.get("steady_samples_per_s") or float("nan")
            log(f"[{r + 1}/{bench.repeats}] {name:16s} {str(outcome.verdict)[:60]}  {speed:.1f} samples/s")
        rows = {name: summarize(name, outcomes, verdicts, bench, device, cpu_mem) for name, outcomes in runs.items()}
        add_ratios(rows)
        if on_round is not None:
            on_round(rows)
    return rows


def median(outcomes: list[TrialOutcome], key: str) -> float | None:
    values = [o.attrs[key] for o in outcomes if o.ok and key in o.attrs]
    return statistics.median(values) if values else None


def summarize(
    name: str, outcomes: list[TrialOutcome], verdicts: MemoryVerdicts, bench: KnobsBench, device, cpu_mem: dict | None = None
) -> dict:
    """One config's row over its runs so far; `cpu_mem` keeps the CPU memory meter's figure per
    config, which does not change from round to round."""
    first, knobs = outcomes[0], knobs_of(name)
    probe = verdicts.get(first.attrs["verdict_key"]) or {}
    row = {
        "config": name,
        "knobs": knobs.as_dict(),
        "verdict": str(first.verdict),
        "verdicts": [str(o.verdict) for o in outcomes],
        # The knob's compute speed at the median steady step, as this table has always reported it;
        # a compiling knob's compile time is in each run's train_samples_per_s beside it.
        "samples_per_s": median(outcomes, "steady_samples_per_s"),
        "step_ms": median(outcomes, "step_time_ms"),
        "slowdown": first.attrs.get("slowdown"),
        "peak_mem_mb": None,
        "probe_s": probe.get("probe_s"),
        "probe_fraction": first.attrs["probe_s"] / first.attrs["trial_s"] if first.ok else None,
        "knobs_observed": first.attrs.get("knobs_observed"),
        "runs": [
            {k: o.attrs.get(k) for k in ("train_samples_per_s", "steady_samples_per_s", "step_time_ms", "trial_s")}
            for o in outcomes
        ],
    }
    if any(o.ok for o in outcomes):
        # On CPU the resident set the trial records is mostly the interpreter and noise; the
        # meter's saved-activation figure shows what a knob changes.
        on_cuda = device.type == "cuda"
        config = trial_config(bench, knobs, bench.steps)
        if on_cuda:
            row["peak_mem_mb"] = median(outcomes, "peak_mem_mb")
        else:
            cpu_mem = {} if cpu_mem is None else cpu_mem
            row["peak_mem_mb"] = cpu_mem[name] = cpu_mem.get(name) or cpu_peak_mem_mb(config, device)
    return row


def add_ratios(rows: dict[str, dict]) -> None:
    base = rows["baseline"]
    for row in rows.values():
        for key in ("samples_per_s", "step_ms", "peak_mem_mb"):
            ok = row[key] is not None and base[key]
            row[key + "_ratio"] = row[key] / base[key] if ok else None


def measure_overhead(bench: KnobsBench, device: torch.device) -> dict:
    """A default-knobs trial twice with one verdict store: probed, then cached. The process first
    imports what a worker's trial processes find imported (`preload_lazy_imports`, the forkserver's
    warm-up), timed on its own: a fresh process's first probe would otherwise count it."""
    start = time.perf_counter()
    preload_lazy_imports()
    preload_s = time.perf_counter() - start
    config = trial_config(bench, Knobs(), bench.overhead_steps, eval_every=TrainingConfig().eval_every)
    verdicts = MemoryVerdicts()
    probed, cached = execute(config, verdicts), execute(config, verdicts)
    # A study's later probes find the fp32 reference's step time in the store: they time only the trial.
    later_config = trial_config(bench, Knobs(optimizer="foreach"), bench.overhead_steps, eval_every=TrainingConfig().eval_every)
    later = execute(later_config, verdicts)
    lookups = []
    for _ in range(50):
        start = time.perf_counter()
        key, _ = verdict_key(config, device)
        verdicts.get(key)
        lookups.append(time.perf_counter() - start)
    lookup_s = statistics.median(lookups)
    cached_trial_s = cached.attrs.get("trial_s") or float("nan")
    return {
        "knobs": config.knobs.as_dict(),
        "steps": bench.overhead_steps,
        "preload_imports_s": preload_s,
        "verdict": str(probed.verdict),
        "probe_s": probed.attrs.get("probe_s"),
        "probed_trial_s": probed.attrs.get("trial_s"),
        "probe_fraction": probed.attrs["probe_s"] / probed.attrs["trial_s"] if probed.ok else None,
        "later_knobs": later_config.knobs.as_dict(),
        "later_probe_s": later.attrs.get("probe_s"),
        "later_trial_s": later.attrs.get("trial_s"),
        "later_probe_fraction": later.attrs["probe_s"] / later.attrs["trial_s"] if later.ok else None,
        "cached_lookup_s": lookup_s,
        "cached_trial_s": cached_trial_s,
        "cached_fraction": lookup_s / cached_trial_s,
        "targets": {"probe_fraction": 0.05, "cached_fraction": 0.005},
    }


def meta(bench: KnobsBench, device: torch.device) -> dict:
    return {
        "workload": bench.workload,
        "workload_options": bench.options,
        "device": str(device),
        "device_model": device_model(device),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **cpu_info(),
        "bf16": bf16_supported(device).why or "native",
        "threads": torch.get_num_threads(),
        "batch_size": bench.batch_size,
        "steps": bench.steps,
        "repeats": bench.repeats,
        "compile_backend": bench.compile_backend,
        "skip_slow": bench.skip_slow,
        "peak_mem_means": MEM_CUDA if device.type == "cuda" else MEM_CPU,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def run_knobs(bench: KnobsBench, log: Callable[[str], None] = _progress, on_round: Callable[[dict], None] | None = None) -> dict:
    """The whole benchmark: {"meta", "rows" (one per config), "overhead", "rounds_done"}. Raises
    UserInputError for an unknown workload or a bad option before any training. `on_round` gets the
    result so far after every round (its "overhead" None until the end), so a benchmark cut short
    by a time limit keeps the rounds it finished."""
    device = resolve_device(bench.device)
    create_workload(bench.workload, bench.options)  # bad names and options fail here, before any training
    done = []

    def round_done(rows: dict[str, dict]) -> None:
        done.append(len(done) + 1)
        if on_round is not None:
            on_round({"meta": meta(bench, device), "rows": list(rows.values()), "overhead": None, "rounds_done": len(done)})

    rows = run_configs(bench, device, log, round_done)
    result = {"meta": meta(bench, device), "rows": list(rows.values()), "overhead": None, "rounds_done": len(done)}
    result["overhead"] = measure_overhead(bench, device)
    return result
