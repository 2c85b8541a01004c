"""Samples/s and the share of the step spent with collectives in flight, 1 rank against 2, for DDP
at two bucket sizes and FSDP2 with and without resharding after forward, on a causal LM whose
step is compute-bound (issue 49, section 8).

Each row is one trial through hpo's own path (`hpo.trial._ranks.execute_ranks`: the launcher, the
ranks over gloo, the record), its record read back: `parallel.samples_per_s` (the global batch
over the median steady step), `collective_share`, `mfu`, the wire. Every rank computes on one
thread, so 2 ranks have twice the compute of 1 and the ideal speed-up is 2x. The rows run in
rounds (every configuration once per round, in order), so a load that comes and goes on a shared
host falls on all of them alike; each row's figure is its median over the rounds. The load average
is recorded before and after each trial. `bucket_cap_mb` is DDP's knob only: FSDP2 reduces one
block's gradients per collective, so its rows vary its own knob, `reshard_after_forward`."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

from hpo.config.resolve import fixed_config
from hpo.config.space import parse_space
from hpo.config.trial import TrialConfig
from hpo.records import RecordKey
from hpo.trial import execute_ranks

__all__ = ["ROWS", "row_config", "rows_for", "run_parallel_bench"]

# A causal LM whose step is compute-bound at one thread per rank: its 3.3M parameters' gradients
# (12.7 MB in fp32) cross the wire once per step, against 2.7 GFLOP of compute per sample.
MODEL = {"d_model": 256, "n_layers": 4, "n_heads": 4, "seq_len": 128, "corpus_bytes": 200_000}
GLOBAL_BATCH = 16
# --toy (gpu-session's rehearsal on a CPU): a model that trains in seconds, and the first two rows.
TOY_MODEL = {"d_model": 16, "n_layers": 2, "n_heads": 2, "seq_len": 16, "corpus_bytes": 20_000}
TOY_ROWS = 2
SMALL_BUCKET_MB, LARGE_BUCKET_MB = 1.0, 25.0

ROWS: dict[str, dict] = {
    "1 rank": {"processes": 1},
    f"DDP, 2 ranks, bucket_cap_mb {LARGE_BUCKET_MB:g}": {"strategy": "ddp", "bucket_cap_mb": LARGE_BUCKET_MB},
    f"DDP, 2 ranks, bucket_cap_mb {SMALL_BUCKET_MB:g}": {"strategy": "ddp", "bucket_cap_mb": SMALL_BUCKET_MB},
    "FSDP2, 2 ranks, reshard_after_forward true": {"strategy": "fsdp", "reshard_after_forward": True},
    "FSDP2, 2 ranks, reshard_after_forward false": {"strategy": "fsdp", "reshard_after_forward": False},
}
ONE_GPU_ROW = "1 rank, nccl"


def rows_for(device: str, gpus: int) -> dict[str, dict]:
    """The rows this host can run: every row over gloo on the CPU; over NCCL on CUDA, one rank per
    GPU. A one-GPU host runs its one rank through NCCL's group (a trial of ranks there is a world
    of 1: its config agreed over NCCL, nothing wrapped); the 2-rank rows wait for 2 GPUs."""
    if device == "cpu":
        return ROWS
    if gpus < 2:
        return {ONE_GPU_ROW: {"processes": 1, "backend": "nccl"}}
    return {name: {**parallel, "backend": "nccl"} for name, parallel in ROWS.items()}


def row_config(parallel: dict, steps: int, device: str = "cpu", model: dict | None = None) -> TrialConfig:
    model = MODEL if model is None else model
    raw = {
        "workload": {"name": "causal_lm", "max_steps": steps, "eval_every": steps, "eval_batches": 1, **model},
        "params": {"batch_size": GLOBAL_BATCH, "lr": 1e-3},
        "systems": {
            "precision": "fp32",
            "attention": "sdpa",
            "optimizer": "foreach",
            "compile": False,
            "device": device,
            "parallel": {"processes": 2, "collective_timeout_s": 120, **parallel},
        },
    }
    return fixed_config(parse_space(raw, "bench-parallel"))


def _trial(name: str, config: TrialConfig) -> dict:
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    attrs: dict = {}
    outcome = execute_ranks(config, attrs, deadline_s=600)
    ranks = attrs.get(RecordKey.PARALLEL, {})
    return {
        "row": name,
        "verdict": str(outcome.verdict),
        "samples_per_s": ranks.get("samples_per_s"),
        "collective_share": attrs.get(RecordKey.COLLECTIVE_SHARE),
        "collective_share_per_rank": ranks.get("collective_share_per_rank"),
        "mfu": attrs.get(RecordKey.MFU),
        "peak_memory_mb_max": ranks.get("peak_memory_mb_max"),
        "wire_calls": {kind: seen["calls"] for kind, seen in ranks.get("wire", {}).items()},
        "parallel_observed": attrs.get(RecordKey.PARALLEL_OBSERVED),
        "trial_s": time.perf_counter() - started,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def _median(trials: list[dict], field: str) -> float | None:
    values = [t[field] for t in trials if t[field] is not None]
    return statistics.median(values) if values else None


def summarize(trials: list[dict]) -> list[dict]:
    """Per row: the medians over its rounds, its speed-up over 1 rank's median, the load it ran at."""
    by_row = {name: [t for t in trials if t["row"] == name] for name in dict.fromkeys(t["row"] for t in trials)}
    one_rank = _median(by_row.get("1 rank", by_row.get(ONE_GPU_ROW, [])), "samples_per_s")
    rows = []
    for name, runs in by_row.items():
        if not runs:
            continue
        speed = _median(runs, "samples_per_s")
        rows.append(
            {
                "row": name,
                "rounds": len(runs),
                "samples_per_s": speed,
                "speedup_over_1_rank": None if speed is None or not one_rank else speed / one_rank,
                "collective_share": _median(runs, "collective_share"),
                "mfu": _median(runs, "mfu"),
                "load_median": statistics.median([t["load_before"] for t in runs] + [t["load_after"] for t in runs]),
            }
        )
    return rows


def run_parallel_bench(
    steps: int,
    rounds: int,
    on_trial: Callable[[dict], None] | None = None,
    device: str = "cpu",
    gpus: int = 0,
    time_cap_s: float | None = None,
    toy: bool = False,
) -> dict:
    """Every row this host can run (`rows_for`) once per round, none started past `time_cap_s`;
    returns each trial and the per-row summary."""
    rows, trials, started = rows_for(device, gpus), [], time.monotonic()
    model = TOY_MODEL if toy else MODEL
    if toy:
        rows = dict(list(rows.items())[:TOY_ROWS])
    for round_index in range(rounds):
        for name, parallel in rows.items():
            if time_cap_s is not None and time.monotonic() - started > time_cap_s:
                break
            trial = {"round": round_index, **_trial(name, row_config(parallel, steps, device, model))}
            trials.append(trial)
            if on_trial is not None:
                on_trial(trial)
    meta = {"model": model, "global_batch": GLOBAL_BATCH, "steps": steps, "device": device, "gpus": gpus}
    return meta | {"rows_asked": list(rows), "trials": trials, "rows": summarize(trials)}
