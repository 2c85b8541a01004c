"""scripts/gpu-session: each step inside its own limit and the session's deadline, its files under
$OUT after every step (at most 8 come back from a device call), the plan within 8 minutes, and the
whole session at toy size on this CPU."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.gpu_session import Run, Session, Step
from benchmarks.gpu_session_plan import BUDGET_S, Plan
from benchmarks.gpu_session_streams import stream_args
from benchmarks.gpu_wheels import MACHINE_HAS, SKIP, wheel_list

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu-session"
MAX_FILES = 8  # what a device call brings back from $OUT


def _session(tmp_path: Path, budget_s: float = 60.0) -> Session:
    return Session(tmp_path / "out", tmp_path / "work", budget_s, dict(os.environ), "gpu-session-test", {"meta": {}})


def _python(code: str, stdout: Path | None = None) -> Run:
    return Run((sys.executable, "-c", code), stdout)


def test_a_step_past_its_limit_is_killed_with_what_it_started_and_the_session_goes_on(tmp_path):
    session = _session(tmp_path)
    # The child starts a grandchild that would outlive it: the whole process group goes.
    sleeper = (
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )
    start = time.monotonic()
    hung = session.run(Step("hung", "sleeps", 1.0, ((_python(sleeper),), (_python("print('fast')"),))))
    assert time.monotonic() - start < 10
    assert hung["timed_out"] and hung["result"] == "cut short"
    assert [job["rcs"] for job in hung["jobs"]] == [["timeout"], [0]]  # the parallel job that finished is kept
    after = session.run(Step("after", "runs", 30.0, ((_python("print('ran')"),),)))
    assert after["result"] == "ok"
    record = json.loads((tmp_path / "out" / "gpu-session-test.json").read_text())
    assert [s["step"] for s in record["steps"]] == ["hung", "after"]
    log = (tmp_path / "out" / "gpu-session-test.log").read_text()
    assert "killed at its step's limit" in log and "ran" in log


def test_a_step_gets_no_more_than_the_time_left_and_is_skipped_without_it(tmp_path):
    session = _session(tmp_path, budget_s=12.0)
    first = session.run(Step("long", "asks for more than the budget", 1000.0, ((_python("print(1)"),),)))
    assert first["limit_s"] <= 12.0
    session.deadline = time.monotonic() + 3  # what is left is less than a step needs
    skipped = session.run(Step("late", "too late", 100.0, ((_python("print(1)"),),)))
    assert re.match(r"skipped: [0-3] s left", skipped["result"]) and "jobs" not in skipped


def test_a_commands_stdout_goes_to_its_file_and_a_failed_collect_is_recorded(tmp_path):
    session, target = _session(tmp_path), tmp_path / "value.txt"

    def collect(record: dict) -> None:
        record["value"] = int(target.read_text())
        json.loads("not json")

    entry = session.run(Step("write", "prints", 30.0, ((_python("print(41 + 1)", stdout=target),),), collect=collect))
    assert target.read_text().strip() == "42" and session.record["value"] == 42
    assert entry["collect_error"].startswith("JSONDecodeError")


def test_the_plan_fits_one_device_call_and_keeps_at_most_six_files(tmp_path):
    plan = Plan(REPO, tmp_path / "out", tmp_path / "work", "cuda-nvidia-h100-80gb-hbm3", tmp_path / "wheels", toy=False)
    steps = plan.steps()
    assert [s.name for s in steps] == ["install", "environment", "correctness", "knobs", "vs-bare", "compiled", "probe_first"]
    # Every step but the last has a cap; their sum leaves the last one time within the budget, and the
    # budget leaves the script's own start and last write inside a device call's 600 s.
    assert steps[-1].cap_s is None and all(s.cap_s for s in steps[:-1])
    assert sum(s.cap_s for s in steps[:-1]) <= BUDGET_S - 60 and BUDGET_S <= 600 - 30
    results = {plan.gpu_check_rows.name, plan.knobs.name, plan.vs_bare.name}
    assert results == {
        "gpu-check-cuda-nvidia-h100-80gb-hbm3.jsonl",
        "knobs-causal_lm-cuda-nvidia-h100-80gb-hbm3.json",
        "vs-bare-big-cuda-nvidia-h100-80gb-hbm3.json",
    }
    # big.yaml is compiled as it is otherwise, and the studies run gpu.yaml under both strategies
    assert "compile: default}" in (tmp_path / "work" / "big-compiled.yaml").read_text()
    assert "strategy: probe_first" in (tmp_path / "work" / "gpu-probe_first.yaml").read_text()
    streams = [job[0].argv for job in steps[2].jobs[:-5]]  # the last five: the joint study, memory, ranks, zoo, loader
    assert all("--out-dir" in argv and str(tmp_path / "out") not in " ".join(argv) for argv in streams)
    # The memory budget: big.yaml under half the device, its JSON in the session's work folder (8 files come back at most).
    memory = list(steps[2].jobs[-4][0].argv)
    assert memory[1].endswith("scripts/bench-memory") and memory[memory.index("--limit") + 1] == "half"
    assert memory[memory.index("--config") + 1].endswith("big.yaml") and memory[memory.index("--out") + 1] == str(plan.memory)
    assert plan.memory.parent == tmp_path / "work" and 0 < float(memory[memory.index("--time-cap") + 1]) < steps[2].cap_s
    # Trials of ranks over NCCL, one rank per GPU the machine shows; their JSON in the work folder too.
    ranks = list(steps[2].jobs[-3][0].argv)
    assert ranks[1].endswith("scripts/bench-parallel") and ranks[ranks.index("--device") + 1] == "cuda"
    assert ranks[ranks.index("--out") + 1] == str(plan.parallel) and plan.parallel.parent == tmp_path / "work"
    assert 0 < float(ranks[ranks.index("--time-cap") + 1]) < steps[2].cap_s
    # The zoo writes its JSON under out, after each model, and starts none past most of the step's cap.
    zoo = list(steps[2].jobs[-2][0].argv)
    assert zoo[1].endswith("scripts/zoo-table") and zoo[zoo.index("--json") + 1] == str(plan.zoo)
    assert plan.zoo.name == "zoo-cuda-nvidia-h100-80gb-hbm3.json" and zoo[zoo.index("--device") + 1] == "cuda"
    assert 0 < float(zoo[zoo.index("--time-cap") + 1]) < steps[2].cap_s
    # The loader stream on the GPU: pinned and unpinned, its JSON under out after each setting, none started past its cap.
    load = list(steps[2].jobs[-1][0].argv)
    assert load[1].endswith("scripts/bench-loader") and load[load.index("--device") + 1] == "cuda"
    assert load[load.index("--out") + 1] == str(plan.loader) and plan.loader.name == "loader-cuda-nvidia-h100-80gb-hbm3.json"
    assert 0 < float(load[load.index("--time-cap") + 1]) < steps[2].cap_s and int(load[load.index("--steps") + 1]) <= 20


def test_the_caps_leave_the_h200s_slowest_rows_room_with_a_margin(tmp_path):
    steps = {s.name: s for s in Plan(REPO, tmp_path / "out", tmp_path / "work", "cuda-x", None, toy=False).steps()}
    # big.yaml compiled took 39.7 s on the H200 with cold caches, after about 12 s of process start.
    assert steps["compiled"].cap_s >= 1.5 * (39.7 + 12)
    # The attention stream: 8 combinations at the H200's 13.3 s each, one process apiece.
    assert steps["correctness"].cap_s >= 1.5 * 8 * 13.3
    assert steps["environment"].cap_s >= 45  # 25 s was too little for a cold torch import and CUDA start
    # The compile stream (4 combinations, each also compiling for about 15 s) fits as well.
    assert steps["correctness"].cap_s >= 1.5 * 4 * (13.3 + 15.0)


def test_the_row_the_first_call_fix_is_seen_on_runs_first_in_its_stream():
    from hpo.app.gpu_check import choices_from_flags, matrix

    def first(name: str):
        args, lists, key = stream_args(name), {}, None
        for arg in args:
            key = arg if arg.startswith("--") else key
            lists.setdefault(key, []) if arg.startswith("--") else lists[key].append(arg)
        m = matrix(choices_from_flags(lists))
        return m[0].precision, m[0].attention, len(m)

    assert first("attention") == ("bf16", "sdpa_cudnn", 8)  # cut at its limit, the stream has still run it
    assert first("lightning")[:2] == ("bf16", "sdpa_cudnn")


def test_the_wheels_are_what_hpo_needs_and_the_machine_lacks():
    pins = wheel_list()
    assert {"optuna", "sqlalchemy", "alembic", "pydantic", "pydantic-core", "cmaes", "pmdarima"} <= set(pins)
    assert not (set(pins) - {"typing-extensions"}) & MACHINE_HAS
    assert not set(pins) & set(SKIP) and "torch" not in pins


def test_dry_run_lists_every_step_and_runs_nothing(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("install", "environment", "correctness", "knobs", "vs-bare", "compiled", "probe_first"):
        assert f"\n{name}: " in "\n" + proc.stdout
    assert (
        "scripts/gpu-check" in proc.stdout
        and "scripts/bench-loader --device cuda" in proc.stdout
        and "bench-vs-bare" in proc.stdout
        and "big-compiled.yaml" in proc.stdout
    )
    # probe_first has no cap of its own: it gets what the others leave, which is not the whole budget.
    rest = BUDGET_S - sum(s.cap_s for s in Plan(REPO, tmp_path / "o", tmp_path / "w", "cpu", None, toy=False).steps()[:-1])
    assert (
        f"probe_first: a probe_first study of search_spaces/gpu.yaml, alone (the rest of the {BUDGET_S:.0f} s budget: "
        in proc.stdout
    )
    assert f"at least {rest:.0f} s)" in proc.stdout and f"at most {BUDGET_S:.0f} s" not in proc.stdout


@pytest.mark.slow
def test_a_toy_session_on_the_cpu_writes_its_files_under_out(tmp_path):
    out = tmp_path / "out"  # no --wheels: a toy run uses this venv's packages
    steps = "install,environment,correctness,compiled"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--toy",
            "--out",
            str(out),
            "--only",
            steps,
            "--budget",
            "900",
            "--commit",
            "abc1234",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted(p.name for p in out.rglob("*") if p.is_file())
    assert len(files) <= MAX_FILES, files
    kind = next(f for f in files if f.endswith(".json")).removeprefix("gpu-session-").removesuffix(".json")
    assert kind.startswith("cpu")  # a toy run never names a GPU
    assert set(files) == {f"gpu-session-{kind}.{ext}" for ext in ("json", "log", "md")} | {
        f"gpu-check-{kind}.jsonl",
        f"zoo-{kind}.json",
        f"loader-{kind}.json",
    }
    zoo = json.loads((out / f"zoo-{kind}.json").read_text())  # the zoo ran its models through the probe
    assert set(zoo["models"]) == {"causal_lm", "resnet"}, zoo
    loader = json.loads((out / f"loader-{kind}.json").read_text())  # the loader stream ran real trials on this CPU
    assert loader["device"] == "cpu" and loader["rows"] and all(r["verdict"] == "ok" for r in loader["rows"].values()), loader
    record = json.loads((out / f"gpu-session-{kind}.json").read_text())
    assert [s["step"] for s in record["steps"]] == steps.split(",")
    assert all(s["result"] == "ok" for s in record["steps"]), record["steps"]
    assert record["meta"]["torch"] and record["meta"]["toy"] and "attention" in record["doctor"]
    assert record["meta"]["commit"] == "abc1234"  # as sent: the device's copy of the tree may have no .git
    assert record["missing"] == []  # this venv has git and every package; a toy run asks for no GPU
    rows = [json.loads(line) for line in (out / f"gpu-check-{kind}.jsonl").read_text().splitlines()]
    assert {row["stream"] for row in rows} == {"attention", "optimizer"} and all(r["verdict"] == "ok" for r in rows)
    assert record["joint"]["trials"] and record["joint"]["best"][0]["verdict"] == "ok"
    memory = record["memory"]["rows"]  # the memory budget ran each row as a real trial under its limit
    assert len(memory) == 3 and all(r["verdict"] == "ok" and r["predicted_peak_mb"] and r["peak_mem_mb"] for r in memory.values())
    ranks = record["parallel"]  # trials of ranks ran for real: one rank, then two over gloo with their all-reduce seen
    assert [t["row"] for t in ranks["trials"]] == ranks["rows_asked"] == ["1 rank", "DDP, 2 ranks, bucket_cap_mb 25"]
    assert all(t["verdict"] == "ok" for t in ranks["trials"]) and ranks["trials"][1]["wire_calls"]["all_reduce"] >= 1
    assert record["compiled"]["verdict"] == "ok" and record["compiled"]["knobs_observed"]["compile"] is True
    summary = (out / f"gpu-session-{kind}.md").read_text()
    assert "| correctness |" in summary and "## gpu-check" in summary and "## joint study" in summary


def test_the_gpu_and_its_driver_are_read_from_nvidia_smi(tmp_path, monkeypatch):
    # nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader prints one line per GPU.
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA H200, 580.159.03, 143771 MiB'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    from benchmarks.host import gpu_info, host_kind

    info = gpu_info()
    assert info == {"gpu_name": "NVIDIA H200", "gpu_driver": "580.159.03", "gpu_memory": "143771 MiB"}
    assert host_kind({}, info["gpu_name"]) == "cuda-nvidia-h200"
