"""`systems.cudnn_benchmark`: cuDNN's autotuner. With it on, the first convolution of each input
shape times cuDNN's algorithms and keeps the fastest; off, cuDNN picks by heuristics.

Applied to the process, per trial: `torch.backends.cudnn.benchmark` is set around every step of the
trial and restored after it, so a worker's trials each run their own setting (hpo set it for every
CUDA trial before it was a knob, hence the default). Observed inside the step: the flag as the step
reads it, on a CUDA device. cuDNN runs only there: on a CPU the setting does nothing, its observation
is null and an export writes nothing for it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from hpo.knobs.knob import HfPart, Knob, LightningPart, LoopPart

__all__ = ["KNOB"]


class CudnnBenchmark(Knob):
    name = "cudnn_benchmark"
    help = "cuDNN times its convolution algorithms per input shape and keeps the fastest (CUDA only)"
    position = 60
    applies_to = "process"
    values = (False, True)
    default = True
    # As every CUDA trial ran before the knob existed; its algorithms compute the same convolution.
    reference = True
    value_type = bool
    schema = bool
    gpu_check_values = (True,)  # gpu-check times kernels; the autotuner is one more variable it does not search
    observed_fields = {"cudnn_benchmark": (bool | None, None)}  # null: no cuDNN where the step ran
    evidence_required = False

    @contextlib.contextmanager
    def applied(self, value: Any, device_type: str) -> Iterator[None]:
        import torch

        saved = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = value
        try:
            yield
        finally:
            torch.backends.cudnn.benchmark = saved

    def read_in_step(self, device_type: str) -> Any:
        import torch

        return bool(torch.backends.cudnn.benchmark) if device_type == "cuda" else None

    def observe(self, evidence: Any) -> dict[str, Any]:
        return {"cudnn_benchmark": evidence.in_step.get(self.name)}

    def python_loop(self, w: Any) -> LoopPart:
        value = w.knobs[self.name]
        return LoopPart(setup=[] if value is None else [f"torch.backends.cudnn.benchmark = {value}"])

    def hf(self, w: Any) -> HfPart:
        value = w.knobs[self.name]
        note = (
            f"# cudnn_benchmark: TrainingArguments has none; set torch.backends.cudnn.benchmark = {value} before trainer.train()"
        )
        return HfPart(notes=[] if value is None else [note])

    def lightning(self, w: Any) -> LightningPart:
        value = w.knobs[self.name]
        return LightningPart(trainer={} if value is None else {"benchmark": value})


KNOB = CudnnBenchmark()
