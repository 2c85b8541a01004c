"""Attention kernels with a known cost profile, for the timing tests: `plan_building_sdpa` pays
FIRST_CALL_S on its first call per (shape, dtype) in a process, as cuDNN attention builds and
caches an execution plan per shape, dtype and thread (aten/src/ATen/native/cudnn/MHA.cpp), and is
otherwise SDPA's math kernel; `slow_sdpa` pays `SLOW_S` on every call: truly slow. Each stands in
for `sdpa_math` through its registry spec (`hpo.knobs.registry`), so its evidence is the math
kernel's."""

from __future__ import annotations

import dataclasses
import time

from hpo.knobs import registry
from hpo.knobs.attention_kernels import sdpa_attention

FIRST_CALL_S = 1.0
SLOW_S = 0.0  # set by the test, from this machine's reference step
planned: set[tuple] = set()  # the (shape, dtype) pairs whose plan this process has built


def plan_building_sdpa(q, k, v, **kwargs):
    key = (tuple(q.shape), q.dtype)
    if key not in planned:
        planned.add(key)
        time.sleep(FIRST_CALL_S)
    return sdpa_attention(q, k, v, **kwargs)


def slow_sdpa(q, k, v, **kwargs):
    time.sleep(SLOW_S)
    return sdpa_attention(q, k, v, **kwargs)


def as_sdpa_math(monkeypatch, kernel: str) -> None:
    """`sdpa_math` runs `kernel` (a name in this module) from now on, in this process."""
    spec = dataclasses.replace(registry.ATTENTION_SPECS["sdpa_math"], builder=f"{__name__}:{kernel}")
    monkeypatch.setitem(registry.ATTENTION_SPECS, "sdpa_math", spec)
