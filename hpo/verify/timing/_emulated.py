"""A precision this CPU has no instructions for, proven slow once per machine rather than per model.

bf16 without avx512_bf16 or AMX, and fp16 without avx512_fp16 or AMX-FP16, run as emulated code
(FINDINGS.md: fp16 matmul at 1 GFLOP/s against fp32's 94). Proving that for each model costs the
first study several emulated steps per proof: 45-50 s of a MiniLM study's 300 s on an AVX2 host.
So it is measured once per machine, on the kernels a trial runs (a Linear layer's forward and
backward under autocast, beside the same in fp32, interleaved and steady), and kept in the machine
facts with its ratio and date (`hpo.verify.stored._machine_facts`). A study then rejects the precision for
every model, unless the stored ratio is under EMULATED_SLOW_FROM: a measured ratio that low leaves
the judgment to the per-model proof (`hpo.verify.timing._slow_proof`). `hpo probe --fresh` measures again.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from hpo.hardware import torch_threads
from hpo.hardware.probes import cpu_model
from hpo.torch_compat import cpu_has_native_bf16, cpu_has_native_fp16
from hpo.verdicts import Kind, Verdict
from hpo.verify.stored import MachineFacts

__all__ = ["EMULATED_SLOW_FROM", "emulated_slow", "emulation_fact", "measure_emulation"]

# Under this ratio an emulated precision is left to the per-model proof: the default slow limit is
# 5x, and a model dominated by other work than matmuls gains back part of the gap.
EMULATED_SLOW_FROM = 3.0
# The measured layer: large enough that the matmul, not the call, is timed (0.3 ms in fp32 here),
# small enough that an emulated fp16 round costs tens of milliseconds, not seconds.
ROWS, WIDTH = 128, 256
ROUNDS = 5
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def native(precision: str) -> bool:
    """Whether this CPU computes `precision` in hardware (fp32 always does)."""
    if precision == "bf16":
        return cpu_has_native_bf16()
    if precision == "fp16":
        return cpu_has_native_fp16()
    return True


def emulated_slow(precision: str, device: torch.device, facts: MachineFacts | None = None) -> Verdict | None:
    """The machine-wide `slow` verdict of `precision` on this CPU, or None: on a GPU, for a native
    precision, and where the stored ratio is under EMULATED_SLOW_FROM. It implicates the precision
    alone, for every model and batch size."""
    if device.type != "cpu" or native(precision):
        return None
    fact = emulation_fact(precision, facts if facts is not None else MachineFacts())
    if fact["ratio"] < EMULATED_SLOW_FROM:
        return None
    day = time.strftime("%Y-%m-%d", time.gmtime(fact["at"]))
    detail = f"emulated on this CPU ({precision} matmul {fact['ratio']:.0f}x fp32, machine fact of {day})"
    return Verdict.make(Kind.SLOW, detail, [("precision", precision)])


def emulation_fact(precision: str, facts: MachineFacts) -> dict:
    """The stored measurement of `precision` against fp32 on this CPU and torch, measured and
    stored first where there is none (or `facts` is fresh)."""
    key, hashed = facts.key("emulated-precision", [], {"precision": precision, "cpu": cpu_model(), "torch": torch.__version__})
    fact = facts.get(key)
    if fact is None or "ratio" not in fact:
        fact = {**hashed, **measure_emulation(precision)}
        facts.put(key, fact)
        fact["at"] = time.time()
    return fact


def measure_emulation(precision: str) -> dict:
    """A Linear layer's forward and backward under `precision`'s autocast and in fp32, one step of
    each a round after an untimed one, the side that goes first alternating; the fastest of each.
    On one thread: on a busy host OpenMP's threads waiting for each other took both sides to 84 ms
    (fp32 0.5 ms alone), a ratio of 1.1 where one thread measured 21."""
    with torch_threads(1):
        return _measured(precision)


def _measured(precision: str) -> dict:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(ROWS, WIDTH, generator=generator)
    weight = torch.randn(WIDTH, WIDTH, generator=generator, requires_grad=True)
    times = _interleaved_ms(x, weight, {"fp32": None, precision: DTYPES[precision]})
    fp32_ms, emulated_ms = min(times["fp32"]), min(times[precision])
    return {
        "ratio": emulated_ms / fp32_ms,
        "fp32_ms": fp32_ms,
        f"{precision}_ms": emulated_ms,
        "kernel": f"F.linear {ROWS}x{WIDTH} @ {WIDTH}x{WIDTH}, forward and backward, autocast",
        "rounds": ROUNDS,
        "threads": 1,
    }


def _interleaved_ms(x: torch.Tensor, weight: torch.Tensor, sides: dict[str, torch.dtype | None]) -> dict[str, list[float]]:
    """Each side's step times (ms) over ROUNDS rounds, the side that goes first alternating, after
    one untimed step of each."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for dtype in sides.values():
        _step(x, weight, dtype)  # untimed: the first call builds oneDNN's primitives
    for round_ in range(ROUNDS):
        for name in sides if round_ % 2 == 0 else reversed(sides):
            start = time.perf_counter()
            _step(x, weight, sides[name])
            times[name].append(1000 * (time.perf_counter() - start))
    return times


def _step(x: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype | None) -> None:
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        F.linear(x, weight).sum().backward()
    weight.grad = None
