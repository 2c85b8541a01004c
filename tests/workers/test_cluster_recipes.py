"""The cluster recipes run: the Slurm array script and the Kubernetes Indexed Job's worker command,
read from the files the docs point to, join a study created as their comments say and spend its
budget, through PgBouncer (the supported path for many workers)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from worker_harness import ROOT, hpo, hpo_env, space_file, tickets, trials

SBATCH = ROOT / "scripts" / "slurm" / "hpo-workers.sbatch"
JOB = ROOT / "scripts" / "k8s" / "hpo-workers-job.yaml"


def _create(tmp_path, url: str, study: str, n_trials: int) -> None:
    create = hpo("run", space_file(tmp_path, n_trials=n_trials), "--storage", url, "--study", study, "--workers", "0")
    assert create.returncode == 0, create.stderr[-3000:]


def _hpo_command(tmp_path):
    """An `hpo` executable, as the recipes expect on PATH, running this checkout."""
    exe = tmp_path / "hpo"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m hpo.app.cli "$@"\n')
    exe.chmod(0o755)
    return exe


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_slurm_array_task_runs_the_study(pgbouncer_url, tmp_path):
    _create(tmp_path, pgbouncer_url, "my-study", n_trials=2)
    secret = tmp_path / "hpo-storage"
    secret.write_text(f"export HPO_STORAGE='{pgbouncer_url}'\n")
    env = hpo_env(HPO_STORAGE_FILE=str(secret), HPO=str(_hpo_command(tmp_path)), SLURM_ARRAY_TASK_ID="0")
    env.pop("HPO_STORAGE", None)
    # The heartbeat settings the harness uses (short, for a quick test) pass through the script's defaults.
    task = subprocess.run(["bash", str(SBATCH), "my-study"], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert task.returncode == 0, task.stderr[-3000:]
    assert "joining study my-study" in task.stdout
    assert tickets(pgbouncer_url, "my-study") == ((2, 2), 0)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kubernetes_indexed_job_worker_command_runs_the_study(pgbouncer_url, tmp_path):
    job = yaml.safe_load(JOB.read_text())
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    container = job["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    study = args[args.index("--study") + 1]
    env_names = {e["name"] for e in container["env"]}
    assert "HPO_STORAGE" in env_names  # from the Secret, never in the manifest
    plain = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    _create(tmp_path, pgbouncer_url, study, n_trials=2)
    env = hpo_env(
        HPO_STORAGE=pgbouncer_url, JOB_COMPLETION_INDEX="0", **{k: v for k, v in plain.items() if not k.startswith("HPO_")}
    )
    pod = subprocess.run([str(_hpo_command(tmp_path)), *args], capture_output=True, text=True, timeout=240, env=env)
    assert pod.returncode == 0, pod.stderr[-3000:]
    assert tickets(pgbouncer_url, study) == ((2, 2), 0)
    assert len(trials(pgbouncer_url, study)) == 2
