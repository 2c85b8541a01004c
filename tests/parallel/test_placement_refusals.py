"""Requests for ranks a host cannot place, refused by `hpo validate` as a user meets it: exit code 2
and one line on stderr naming the key, the value and the fix. The GPUs are those
CUDA_VISIBLE_DEVICES shows (validate imports no torch); each case is its own `hpo` process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from space_files import write_space

ROOT = Path(__file__).resolve().parents[2]


def space(device: str, **parallel) -> dict:
    return {
        "workload": {"name": "causal_lm", "max_steps": 2},
        "params": {"batch_size": 12},
        "systems": {"device": device, "parallel": parallel},
    }


CASES = {
    "more ranks than GPUs": (
        space("cuda", processes=4),
        "0,1",
        "systems.parallel.processes: 4 ranks need as many GPUs, CUDA_VISIBLE_DEVICES shows 2; "
        "lower processes or make more GPUs visible",
    ),
    "ranks that do not divide the GPUs": (
        space("auto", processes=3),
        "0,1,2,3",
        "systems.parallel.processes: each worker runs trials of 3 ranks on its own 3 GPUs, and 3 does not divide "
        "the 4 CUDA_VISIBLE_DEVICES shows (1 would sit idle); use processes in [1, 2, 4] or make a multiple of 3 GPUs visible",
    ),
    "nccl on the CPU": (
        space("cpu", processes=2, backend="nccl"),
        None,
        "systems.parallel.backend: nccl runs collectives on CUDA devices, got systems.device cpu; use backend gloo (or auto)",
    ),
    "nccl where no GPU is visible": (
        space("auto", processes=2, backend="nccl"),
        "",
        "systems.parallel.backend: nccl runs collectives on CUDA devices, got systems.device auto where "
        "CUDA_VISIBLE_DEVICES shows no GPU; use backend gloo (or auto)",
    ),
}


def validate(path: Path, visible: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env |= {"PYTHONPATH": str(ROOT)} | ({} if visible is None else {"CUDA_VISIBLE_DEVICES": visible})
    return subprocess.Popen(
        [sys.executable, "-m", "hpo.app.cli", "validate", str(path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_hpo_validate_refuses_ranks_this_host_cannot_place_in_one_line(tmp_path):
    started = {
        name: (validate(write_space(tmp_path / f"{i}.yaml", raw), visible), message)
        for i, (name, (raw, visible, message)) in enumerate(CASES.items())
    }
    for name, (process, message) in started.items():
        out, err = process.communicate(timeout=120)
        assert process.returncode == 2, (name, out, err)
        assert err.strip().splitlines() == [f"hpo validate: error: {tmp_path}/{list(CASES).index(name)}.yaml: {message}"], name


@pytest.mark.parametrize("visible", ["0,1", "0,1,2,3"])
def test_ranks_that_divide_the_visible_gpus_are_accepted(tmp_path, visible):
    process = validate(write_space(tmp_path / "s.yaml", space("cuda", processes=2)), visible)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
