"""scripts/gpu-session brings back what it measured whatever fails: a step whose probe prints nothing,
whose collect or poll raises, whose program is not there, or whose wheels were not carried fails
alone, with one line in the report for what the machine lacks, and the next step runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from benchmarks import gpu_session_env
from benchmarks.gpu_session import Run, Session, Step, broken_step
from benchmarks.gpu_session_plan import Plan, environment_missing
from benchmarks.gpu_session_report import write_summary

REPO = Path(__file__).resolve().parents[2]


def _session(tmp_path: Path) -> Session:
    return Session(tmp_path / "out", tmp_path / "work", 120.0, dict(os.environ), "gpu-session-test", {"meta": {}})


def _plan(tmp_path: Path, wheels: Path | None, toy: bool = True) -> Plan:
    return Plan(REPO, tmp_path / "out", tmp_path / "work", "cpu-test", wheels, toy=toy)


def _then_ok(session: Session) -> dict:
    return session.run(Step("after", "runs", 30.0, ((Run((sys.executable, "-c", "print('ran')")),),)))


def test_an_environment_probe_that_prints_nothing_is_one_line_and_the_session_goes_on(tmp_path):
    session, plan = _session(tmp_path), _plan(tmp_path, None)
    plan.py = sys.executable  # a Python that dies before the probe prints: the cold start cut at its limit
    step = plan.environment()
    step = Step(
        step.name,
        step.what,
        step.cap_s,
        ((Run((sys.executable, "-c", "raise SystemExit(3)"), plan.work / "env.txt"),),),
        collect=step.collect,
    )
    entry = session.run(step)
    assert entry["result"] == "failed" and "collect_error" not in entry
    assert session.record["missing"] == ["environment: the probe printed nothing (the log has its output)"]
    assert _then_ok(session)["result"] == "ok"


def test_a_collect_or_poll_that_raises_anything_is_recorded_and_the_session_goes_on(tmp_path):
    session = _session(tmp_path)

    def collect(record: dict) -> None:
        next(iter(()))  # StopIteration: what a bare next() over no lines raises

    def poll() -> None:
        raise RuntimeError("half a file")

    entry = session.run(Step("probe", "raises", 30.0, ((Run((sys.executable, "-c", "pass")),),), collect=collect, poll=poll))
    assert entry["collect_error"].startswith("StopIteration") and entry["poll_error"] == "RuntimeError: half a file"
    assert _then_ok(session)["result"] == "ok"
    assert [s["step"] for s in json.loads((tmp_path / "out" / "gpu-session-test.json").read_text())["steps"]] == [
        "probe",
        "after",
    ]


def test_a_program_that_is_not_there_and_a_step_not_built_fail_alone(tmp_path):
    session = _session(tmp_path)
    entry = session.run(Step("nogit", "git", 30.0, ((Run((str(tmp_path / "no-such-program"), "status")),),)))
    assert entry["result"] == "failed" and entry["jobs"][0]["rcs"] == ["not started: FileNotFoundError"]
    broken = session.run(broken_step("compiled", ValueError("gpu-session: expected 'compile: false}'")))
    assert broken["result"] == "failed: not built: ValueError: gpu-session: expected 'compile: false}'"
    assert _then_ok(session)["result"] == "ok"


def test_a_forgotten_carry_fails_the_install_step_and_says_so(tmp_path):
    plan = _plan(tmp_path, tmp_path / ".gpu-wheels")  # asked for, never carried
    assert plan.missing_wheels().startswith(f"wheels: no *.whl in {tmp_path / '.gpu-wheels'}: not carried?")
    entry = _session(tmp_path).run(plan.install())
    assert entry["result"] == "failed" and entry["jobs"][0]["rc"] == 1
    log = (tmp_path / "out" / "gpu-session-test.log").read_text()
    assert "not carried?" in log
    # --toy asks for none: this Python has the packages, and that is ok.
    plan = _plan(tmp_path, None)
    assert plan.missing_wheels() is None and _session(tmp_path).run(plan.install())["result"] == "ok"


def test_the_environment_probe_prints_its_line_without_torch_or_a_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    monkeypatch.setattr(gpu_session_env, "PACKAGES", ("optuna", "no-such-package-hpo"))
    env = gpu_session_env.environment()
    assert env["torch"] is None and env["torch_error"].startswith("ModuleNotFoundError")
    assert env["packages"] == {"optuna": env["packages"]["optuna"], "no-such-package-hpo": None}
    assert environment_missing(env, toy=False) == [
        f"torch: does not import ({env['torch_error']})",
        "package no-such-package-hpo: not installed",
    ]
    assert environment_missing({"torch": "2.11.0", "device": None, "packages": {}}, toy=False) == [
        "GPU: torch sees none (torch.cuda.is_available() is False)"
    ]
    assert environment_missing({"torch": "2.11.0", "device": None, "packages": {}}, toy=True) == []


def test_the_summary_keeps_its_other_sections_when_one_result_is_unreadable(tmp_path):
    plan = _plan(tmp_path, None)
    plan.out.mkdir(parents=True)
    plan.knobs.write_text(json.dumps({"meta": {}, "rows": [{"config": "baseline"}]}))  # a row without its fields
    record = {"meta": {"date": "d", "commit": None}, "missing": ["git: not on PATH; commit unknown: pass --commit"]}
    record["steps"] = [{"step": "knobs", "limit_s": 60, "elapsed_s": 5, "result": "cut short"}]
    path = tmp_path / "summary.md"
    write_summary(record, plan, path)
    text = path.read_text()
    assert "| knobs | 60 | 5 | cut short |" in text
    assert "## Missing on this machine\n\n- git: not on PATH; commit unknown: pass --commit" in text
    assert "(a section could not be written: KeyError: 'samples_per_s'" in text


def test_a_wheels_folder_named_relative_to_the_tree_installs_from_the_tree(tmp_path, monkeypatch):
    (tmp_path / ".gpu-wheels").mkdir()
    (tmp_path / ".gpu-wheels" / "x-1.0-py3-none-any.whl").write_bytes(b"")
    monkeypatch.chdir(tmp_path)  # the steps run in the work folder: a relative path would name nothing there
    argv = _plan(tmp_path, Path(".gpu-wheels")).install().jobs[0][0].argv
    assert str(tmp_path / ".gpu-wheels" / "x-1.0-py3-none-any.whl") in argv
