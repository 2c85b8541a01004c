"""The markdown summary of a GPU session (`gpu-session-<host kind>.md`), rewritten after every step
from the session record and the result files the steps wrote: what docs/benchmarks/gpu.md shows."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from benchmarks.memory_budget import table as memory_table

__all__ = ["probe_vs_training", "write_summary"]

PROBE_TRAIN_LIMIT = 0.20  # issue 30: an ok row's probe speed within 20% of its training speed


def _num(value, fmt: str = ".1f") -> str:
    return "–" if value is None else format(value, fmt)


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def probe_vs_training(row: dict) -> float | None:
    """An ok row's probe samples/s over its steady training samples/s, minus one: step against step.
    Rows written before `steady_samples_per_s` existed hold that figure as `train_samples_per_s`."""
    probe, train = row.get("samples_per_s"), row.get("steady_samples_per_s", row.get("train_samples_per_s"))
    return probe / train - 1 if row.get("verdict") == "ok" and probe and train else None


def _header(meta: dict) -> list[str]:
    where = meta.get("gpu_name") or meta.get("device") or meta.get("cpu_model")
    return [
        f"# GPU session {meta.get('date')} at {meta.get('commit')} on {where}",
        "",
        f"driver {meta.get('gpu_driver')}, torch {meta.get('torch')}, CUDA {meta.get('cuda')}, cuDNN {meta.get('cudnn')}, "
        f"Python {meta.get('python')}" + (" (toy run on a CPU: no GPU figures)" if meta.get("toy") else ""),
        "",
        "| step | limit s | took s | result |",
        "|---|---|---|---|",
    ]


def _steps(record: dict) -> list[str]:
    return [f"| {s['step']} | {s['limit_s']} | {s.get('elapsed_s', '–')} | {s['result']} |" for s in record["steps"]]


def _vs_bare(result: dict | None, compiled: dict | None) -> list[str]:
    if not result:
        return []
    s = result["summary"]
    share = s.get("probe_share")
    lines = [
        "",
        f"## hpo against a hand-written loop ({Path(result['meta']['config']).name})",
        "",
        "| | hpo | bare | hpo / bare | goal |",
        "|---|---|---|---|---|",
        f"| samples/s | {_num(s['hpo_samples_per_s'])} | {_num(s['bare_samples_per_s'])} | {_num(s['throughput_ratio'], '.3f')} | >= 0.99 |",
        f"| peak MB | {_num(s['hpo_peak_mem_mb'])} | {_num(s['bare_peak_mem_mb'])} | {_num(s['peak_mem_ratio'], '.3f')} | <= 1.03 |",
        f"| MFU % | {_num(_pct(s['hpo_mfu']))} | {_num(_pct(s['bare_mfu']))} | | |",
        "",
        f"Probe: {_num(None if share is None else 100 * share)}% of hpo's trial (goal < 5%). "
        f"Last training loss, largest relative difference hpo against bare: {_num(s['last_loss_max_rel_diff'], '.1e')}.",
    ]
    if compiled:
        lines += [
            "",
            f"| {Path(result['meta']['config']).name} | samples/s | MFU % | peak MB | probe s | trial s | verdict |",
            "|---|---|---|---|---|---|---|",
            f"| eager (hpo side above) | {_num(s['hpo_reported_samples_per_s'])} | {_num(_pct(s['hpo_reported_mfu']))} | "
            f"{_num(s['hpo_peak_mem_mb'])} | | | ok |",
            f"| compile default | {_num(compiled.get('train_samples_per_s'))} | {_num(_pct(compiled.get('mfu')))} | "
            f"{_num(compiled.get('peak_mem_mb'))} | {_num(compiled.get('probe_s'))} | {_num(compiled.get('trial_s'))} | "
            f"{compiled.get('verdict')} |",
        ]
    return lines


def _knobs(result: dict | None) -> list[str]:
    if not result:
        return []
    lines = [
        "",
        "## Each knob against fp32/eager/for-loop",
        "",
        "| config | samples/s | x | peak MB | x | verdict |",
        "|---|---|---|---|---|---|",
    ]
    if result.get("overhead") is None and result.get("rounds_done"):
        lines.insert(2, f"Rounds finished: {result['rounds_done']} of {result['meta'].get('repeats')} (cut short).")
        lines.insert(3, "")
    for r in result["rows"]:
        lines.append(
            f"| {r['config']} | {_num(r['samples_per_s'])} | {_num(r.get('samples_per_s_ratio'), '.2f')} | "
            f"{_num(r['peak_mem_mb'])} | {_num(r.get('peak_mem_mb_ratio'), '.2f')} | {r['verdict'][:60]} |"
        )
    o = result.get("overhead") or {}
    return lines + [
        "",
        f"Probe: {_num(_pct(o.get('probe_fraction')))}% of a {o.get('steps')}-step trial (first of a study), "
        f"{_num(_pct(o.get('later_probe_fraction')))}% later.",
    ]


def _gpu_check(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "## gpu-check",
        "",
        "| stream | rows | ok | refused | crashed | probe vs training > 20% |",
        "|---|---|---|---|---|---|",
    ]
    by_stream = collections.defaultdict(list)
    for row in rows:
        by_stream[row["stream"]].append(row)
    for stream, group in by_stream.items():
        kinds = collections.Counter(r["verdict"].split(":")[0] for r in group)
        off = [r for r in group if (probe_vs_training(r) or 0) and abs(probe_vs_training(r)) > PROBE_TRAIN_LIMIT]
        refused = len(group) - kinds["ok"] - kinds["crashed"]
        lines.append(f"| {stream} | {len(group)} | {kinds['ok']} | {refused} | {kinds['crashed']} | {len(off)} |")
    not_ok = [r for r in rows if r["verdict"] != "ok"]
    lines += ["", f"Rows not ok: {len(not_ok) or 'none'}", ""]
    for r in not_ok:
        k = r["knobs"]
        lines.append(
            f"- {r['workload']} {k['precision']}/{k['attention']}/{k['optimizer']} ckpt={k['grad_checkpointing']} "
            f"compile={k['compile']}: {r['verdict'][:160]}"
        )
    return lines


def _studies(record: dict) -> list[str]:
    lines = []
    for strategy in ("joint", "probe_first"):
        study = record.get(strategy)
        if study:
            lines += ["", f"## {strategy} study (search_spaces/gpu.yaml)", ""]
            share = study.get("sweep_share")
            if share:
                lines += [
                    f"The opening sweep: {share['sweep_s']} s of the study's {share['study_s']} s, "
                    f"{_num(_pct(share['share']))}% (issue 38's goal: 10% in a first study).",
                    "",
                ]
            lines += ["```", *study["sweep"], *study["trials"], "```"]
    return lines


def _memory(result: dict | None) -> list[str]:
    if not result or not result.get("rows"):
        return []
    return [
        "",
        f"## Memory as a budget (limit {result['limit_gb']} GB, batch_size auto up to {result['max_batch']})",
        "",
        memory_table(result).rstrip("\n"),
        "",
        f"Fastest with checkpointing over fastest without: {_num(result.get('throughput_with_over_without'), '.3f')}; "
        f"predicted over measured peak, minus one: {result.get('prediction_error_range')}. "
        "It shares the GPU with the correctness streams: compare its rows with each other.",
    ]


def _pct(value: float | None) -> float | None:
    return None if value is None else 100 * value


def _missing(record: dict) -> list[str]:
    missing = record.get("missing") or []
    return ["", "## Missing on this machine", "", *(f"- {line}" for line in missing)] if missing else []


def _rows(plan) -> list[dict]:
    if not plan.gpu_check_rows.is_file():
        return []
    lines = plan.gpu_check_rows.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip().endswith("}")]


def write_summary(record: dict, plan, path: Path) -> None:
    """The summary; a section its files cannot make (a result cut short mid-write, a field a newer
    benchmark renamed) is one line saying so, and the other sections are still written."""
    sections = [
        lambda: _header(record["meta"]) + _steps(record),
        lambda: _missing(record),
        lambda: _vs_bare(_load(plan.vs_bare), record.get("compiled")),
        lambda: _knobs(_load(plan.knobs)),
        lambda: _gpu_check(_rows(plan)),
        lambda: _memory(record.get("memory")),
        lambda: _studies(record),
    ]
    lines = []
    for section in sections:
        try:
            lines += section()
        except Exception as exc:  # noqa: BLE001 - one unreadable result must not cost the summary
            lines += ["", f"(a section could not be written: {type(exc).__name__}: {exc}; the .json and .log have the data)"]
    path.write_text("\n".join(lines) + "\n")
