"""One worker per GPU; without a GPU driver on the host, one worker and no torch import to say so."""

from __future__ import annotations

import torch

from hpo.runtime import _placement as placement


def test_one_worker_per_visible_gpu_when_a_driver_is_present(monkeypatch, tmp_path):
    monkeypatch.setattr(placement, "GPU_DRIVER_PATHS", (str(tmp_path),))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert placement.default_workers() == 4


def test_no_driver_means_one_worker_whatever_torch_would_say(monkeypatch, tmp_path):
    monkeypatch.setattr(placement, "GPU_DRIVER_PATHS", (str(tmp_path / "absent"),))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert placement.default_workers() == 1
