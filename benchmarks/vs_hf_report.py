"""What `scripts/bench-vs-hf` reports from `benchmarks.vs_hf.run_vs_hf`'s runs: one summary per
run (start-up, trials, gaps, speed, time outside the training steps), their median and range
over repeats, the side-by-side markdown table and a per-trial table for each side."""

from __future__ import annotations

import statistics

from benchmarks.vs_hf_task import WORKLOADS

__all__ = ["NOTES", "PHASES", "ROWS", "run_metrics", "summarize", "table"]

LABELS = {"hf": "Hugging Face hyperparameter_search (optuna backend)", "hpo": "hpo"}
# (metric, row label, format) of the side-by-side table, top to bottom.
ROWS = (
    ("wall_s", "whole search, wall clock", ".2f s"),
    ("startup_s", "start-up (launch to the first trial's start)", ".2f s"),
    ("first_trial_s", "first trial", ".2f s"),
    ("later_trials_s", "later trials (median)", ".2f s"),
    ("between_trials_s", "between trials (median gap)", ".2f s"),
    ("after_last_s", "after the last trial (to exit)", ".2f s"),
    ("samples_per_s", "training speed (samples/s)", ".1f"),
    ("outside_steps_s", "outside the training steps, per trial (median)", ".2f s"),
    ("eval_s", "of which evaluation, per trial (median)", ".2f s"),
    ("best_objective", "best validation loss", ".4f"),
)
# hpo's `phases_s` trial attr, in trial order (hpo.trial._phases); keys not listed are appended.
PHASES = ("start", "sample", "data", "probe", "build", "train", "evidence", "eval", "flops", "storage")
# The columns shown when no trial records `phases_s` (an hpo without it), left blank.
PHASES_EXPECTED = ("start", "data", "build", "probe", "train", "eval", "storage")
NOTES = (
    "A trial lasts from Optuna's datetime_start to datetime_complete, on both sides.",
    "Training speed: batch size over the median optimizer step (batch fetch included; hpo leaves out its "
    "profiled first step, the Trainer side its first step); the median over trials.",
    "Outside the training steps: the trial's wall time less steps x that median step time.",
    "The sides share the data, model, schedule values and knobs, but not every detail: the Trainer's warmup "
    "starts at lr 0 (hpo's at lr/warmup), it exempts biases and LayerNorm from weight decay (hpo does not), and "
    "hpo seeds each trial process's TPE with seed + its ticket (1, 2, ...), so the lrs drawn differ.",
)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def run_metrics(run: dict) -> dict[str, float | None]:
    """The table's numbers for one run of one side."""
    trials = sorted((t for t in run["trials"] if t["start"] is not None), key=lambda t: t["number"])
    done = [t for t in trials if t["complete"] is not None]
    walls = [t["complete"] - t["start"] for t in done]
    outside = [w - t["steps"] * t["median_step_s"] for w, t in zip(walls, done) if t["steps"] and t["median_step_s"]]
    losses = [t["objective"] for t in done if t["objective"] is not None]
    return {
        "wall_s": run["wall_s"],
        "startup_s": trials[0]["start"] - run["launch"] if trials else None,
        "first_trial_s": walls[0] if done and done[0] is trials[0] else None,
        "later_trials_s": _median([w for w, t in zip(walls, done) if t is not trials[0]]),
        "between_trials_s": _median([b["start"] - a["complete"] for a, b in zip(done, done[1:])]),
        "after_last_s": run["exit"] - done[-1]["complete"] if done else None,
        "samples_per_s": _median([t["samples_per_s"] for t in done if t["samples_per_s"]]),
        "outside_steps_s": _median(outside),
        "eval_s": _median([e for e in map(_eval_s, done) if e is not None]),
        "best_objective": min(losses) if losses else None,
    }


def _eval_s(trial: dict) -> float | None:
    """Seconds in evaluation: the Trainer side's timed `evaluate`, hpo's `eval` phase."""
    return trial.get("eval_s", (trial.get("phases_s") or {}).get("eval"))


def summarize(runs: list[dict]) -> dict[str, dict]:
    """Per metric over the runs of one side: the median, min, max and each run's value."""
    per_run = [run_metrics(run) for run in runs]
    summary = {}
    for metric, _, _ in ROWS:
        values = [m[metric] for m in per_run if m[metric] is not None]
        summary[metric] = {
            "median": _median(values),
            "min": min(values, default=None),
            "max": max(values, default=None),
            "values": [m[metric] for m in per_run],
        }
    return summary


def _cell(stat: dict, form: str) -> str:
    """The median, with the range over repeats when there are several: '12.31 s (11.90–13.02)'."""
    if stat["median"] is None:
        return ""
    spec, _, unit = form.partition(" ")
    text = format(stat["median"], spec)
    if len(stat["values"]) > 1:
        text += f" ({stat['min']:{spec}}–{stat['max']:{spec}})"
    return f"{text} {unit}".rstrip()


def _main_table(result: dict) -> list[str]:
    summary = result["summary"]
    lines = [f"| | {LABELS['hf']} | {LABELS['hpo']} |", "|---|---:|---:|"]
    for metric, label, form in ROWS:
        lines.append(f"| {label} | {_cell(summary['hf'][metric], form)} | {_cell(summary['hpo'][metric], form)} |")
    return lines


def _num(value, spec: str = ".2f") -> str:
    return "" if value is None else format(value, spec)


def _outside(t: dict) -> float | None:
    if t["complete"] is None or not t["steps"] or not t["median_step_s"]:
        return None
    return t["complete"] - t["start"] - t["steps"] * t["median_step_s"]


def _wall(t: dict) -> float | None:
    return None if t["complete"] is None or t["start"] is None else t["complete"] - t["start"]


def _phase_columns(trials: list[dict]) -> list[str]:
    present = {key for t in trials for key in (t.get("phases_s") or {})}
    if not present:
        return list(PHASES_EXPECTED)
    return [p for p in PHASES if p in present] + sorted(present - set(PHASES))


def _hpo_trials(run: dict) -> list[str]:
    phases = _phase_columns(run["trials"])
    head = ["trial", "lr", "val_loss", "verdict", "wall s", "outside steps s", "trial_s", "probe_s", "train_s", *phases]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in sorted(run["trials"], key=lambda t: t["number"]):
        probe = _num(t["probe_s"]) + (" (cached)" if t["probe_cached"] else "")
        row = [str(t["number"]), _num(t["lr"], ".2e"), _num(t["objective"], ".4f"), str(t["verdict"] or t["state"])]
        row += [_num(_wall(t)), _num(_outside(t)), _num(t["trial_s"]), probe, _num(t["train_s"])]
        row += [_num((t.get("phases_s") or {}).get(p)) for p in phases]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _hf_trials(run: dict) -> list[str]:
    head = ["trial", "lr", "eval_loss", "wall s", "outside steps s", "model_init s", "training loop s", "steps", "evaluate s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in sorted(run["trials"], key=lambda t: t["number"]):
        row = [str(t["number"]), _num(t["lr"], ".2e"), _num(t["objective"], ".4f"), _num(_wall(t)), _num(_outside(t))]
        row += [_num(t["model_init_s"]), _num(t["train_loop_s"]), str(t["steps"]), _num(t["eval_s"])]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def table(result: dict) -> str:
    """The side-by-side table, then each side's trials in the last repeat, then the definitions."""
    task, meta = result["task"], result["meta"]
    repeats = meta["repeats"]
    spec = WORKLOADS[task["workload"]]
    eval_texts = f", {task['n_eval']} eval texts" if task["workload"] == "text_classification" else ""
    caption = (
        f"{spec.caption}, {task['trials']} trials x {task['steps']} steps, batch {task['batch_size']}{eval_texts}, "
        f"fp32 / SDPA / fused AdamW on {meta['cpu_model']} "
        f"({meta['cpus_usable']} CPUs)" + (f"; median (min–max) of {repeats} alternating repeats" if repeats > 1 else "")
    )
    last = {run["side"]: run for run in result["runs"] if run["repeat"] == repeats - 1}
    lines = [
        caption,
        "",
        *_main_table(result),
        "",
        "hpo trials (last repeat; the columns after train_s are its phases_s attr, in seconds):",
        "",
        *_hpo_trials(last["hpo"]),
    ]
    lines += ["", "Trainer trials (last repeat):", "", *_hf_trials(last["hf"]), ""]
    lines += [f"- {note}" for note in (*NOTES, f"Evaluation: {spec.evaluation}")]
    return "\n".join(lines)
