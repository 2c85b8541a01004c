"""A host with G GPUs and trials of N ranks: `hpo run` starts G/N workers, each on its own slice of
CUDA_VISIBLE_DEVICES, and a trial's ranks land on the GPUs of its worker's slice. Proven on a CPU
with torch.cuda faked as a G-GPU host reports it: `device_count()` counts what
CUDA_VISIBLE_DEVICES leaves visible, read at each call, as a fresh worker process would see it."""

from __future__ import annotations

import os
import subprocess

import pytest
import torch
from parallel_ranks import two_rank_config

from hpo.config.space import parse_space
from hpo.errors import UserInputError
from hpo.parallel.group import rank_device
from hpo.runtime import _placement as placement
from hpo.runtime import _workers as workers
from hpo.trial._ranks import check_ranks_can_run


def visible_on(host_gpus: int, listed: str | None) -> int:
    """How many GPUs CUDA shows a process: all the host's without CUDA_VISIBLE_DEVICES, else the
    listed ordinals up to the first that is not one (out of range, repeated, not a number)."""
    if listed is None:
        return host_gpus
    shown: list[int] = []
    for entry in listed.split(","):
        entry = entry.strip()
        if not entry.isdigit() or int(entry) >= host_gpus or int(entry) in shown:
            break
        shown.append(int(entry))
    return len(shown)


@pytest.fixture
def host_with_gpus(monkeypatch, tmp_path):
    """Make this CPU host look like one with `n` GPUs to placement and to the trial's checks."""

    def make(n: int) -> None:
        monkeypatch.setattr(placement, "GPU_DRIVER_PATHS", (str(tmp_path),))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: visible_on(n, os.environ.get("CUDA_VISIBLE_DEVICES")))

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return make


class StartedWorkers:
    """Stands in for `subprocess.Popen` in `run_workers`: records each `hpo worker`'s environment, exits 0."""

    def __init__(self) -> None:
        self.envs: list[dict] = []
        self.popen = subprocess.Popen

    def __call__(self, cmd, env, preexec_fn):
        assert cmd[3:5] == ["worker", "--study"]
        self.envs.append(env)
        return self.popen(["true"])


def start_workers(monkeypatch, per_trial: int) -> list[str]:
    """What `run_workers` with the default worker count gives each worker as CUDA_VISIBLE_DEVICES."""
    started = StartedWorkers()
    monkeypatch.setattr(workers.subprocess, "Popen", started)
    study = type("Study", (), {"study_name": "s"})()
    assert workers.run_workers(study, "sqlite://", workers=None, timeout=None, isolate=True, per_trial=per_trial) == 0
    return [env.get("CUDA_VISIBLE_DEVICES") for env in started.envs]


def test_four_gpus_and_two_rank_trials_run_two_workers_on_their_own_two_gpus(host_with_gpus, monkeypatch):
    host_with_gpus(4)
    slices = start_workers(monkeypatch, per_trial=2)
    assert slices == ["0,1", "2,3"]
    config = two_rank_config(device="cuda")
    for listed in slices:  # as each worker process sees the host
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
        assert torch.cuda.device_count() == 2
        check_ranks_can_run(config)
        assert [rank_device("cuda", rank) for rank in range(2)] == [torch.device("cuda", 0), torch.device("cuda", 1)]


def test_the_slices_follow_the_order_cuda_visible_devices_lists(host_with_gpus, monkeypatch):
    host_with_gpus(8)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7,6,1,0,3,2")
    assert placement.default_workers(3) == 2
    assert start_workers(monkeypatch, per_trial=3) == ["7,6,1", "0,3,2"]


def test_only_the_gpus_cuda_shows_are_sliced(host_with_gpus, monkeypatch):
    host_with_gpus(2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0,5,6")  # 5 and 6 are not on this host: CUDA shows 2
    assert placement.default_workers(2) == 1
    assert placement.gpu_slices(placement.visible_gpus(), 2) == ["1,0"]


def test_one_gpu_trials_keep_one_worker_per_gpu(host_with_gpus, monkeypatch):
    host_with_gpus(3)
    assert start_workers(monkeypatch, per_trial=1) == ["0", "1", "2"]


def test_a_trial_needing_more_gpus_than_its_worker_sees_refuses_itself_naming_the_count(host_with_gpus, monkeypatch):
    host_with_gpus(1)
    assert placement.default_workers(2) == 1
    assert "CUDA_VISIBLE_DEVICES" not in workers._worker_env(0, 1, "sqlite://", 2)  # it sees the one GPU
    with pytest.raises(UserInputError, match=r"2 ranks need as many GPUs, this process sees 1; lower processes"):
        check_ranks_can_run(two_rank_config(device="cuda"))


def test_a_space_s_trials_take_one_gpu_per_rank():
    raw = {"workload": {"name": "causal_lm"}, "systems": {"device": "cpu", "parallel": {"processes": 4}}}
    assert placement.gpus_per_trial(parse_space(raw, "s.yaml")) == 4
    assert placement.gpus_per_trial(parse_space({"workload": {"name": "causal_lm"}}, "s.yaml")) == 1
