"""Loaded by a worker's forkserver (its preload list) before it forks any trial process: it loads
what every trial of the study would otherwise load again, so that each trial process starts with it,
shared copy-on-write. That is the workload's data (tokenized text, corpora: their loaders cache per
process), one model build (the model code's imports and the pretrained weights' file pages), and
the modules torch imports lazily at a trial's first optimizer (`preload_lazy_imports`).
Isolation is kept: every trial still runs in a fresh process.

The profiler is never started here. A trial process forked after it had been started ran every
training step 8-13% slower (MiniLM, 40-step trials, paired with in-process runs), which the
evidence step's saving did not repay.

Nothing here runs a backward pass: autograd marks a process forked after its engine started as
unable to run backward.

The forkserver learns the study's workload from `WARMUP_ENV`, which the worker sets (see
`warmup_env`). The warm-up runs on one thread: GNU OpenMP's thread pool does not survive a fork,
and a trial process forked after the pool had run hangs at its first parallel region (seen here
with torch 2.13). A warm-up that fails costs the trials only the time it would have saved, so it
is reported in one line and skipped.
"""

from __future__ import annotations

import importlib
import json
import os

from hpo.config.resolve import representative_config
from hpo.config.space import SearchSpace
from hpo.logging import get_logger
from hpo.torch_compat import preloaded_torch_modules
from hpo.verify.fault import REFERENCE_KNOBS

_log = get_logger(__name__)

WARMUP_ENV = "HPO_FORKSERVER_WARMUP"

__all__ = ["WARMUP_ENV", "preload_lazy_imports", "warm_up", "warmup_env"]


def warmup_env(space: SearchSpace) -> str:
    """The value of WARMUP_ENV for a study: its workload at the space's representative values, built
    with the reference attention (every workload has it, and no optional package or device is
    touched in a process that must stay free of CUDA)."""
    config = representative_config(space)
    return json.dumps(
        {
            "workload": config.workload,
            "options": config.workload_options,
            "training": config.training.params(),
            "attention": REFERENCE_KNOBS.attention,
        }
    )


def preload_lazy_imports() -> None:
    """Import what torch imports on first use in every trial: `torch.optim.Optimizer`'s constructor
    imports torch._dynamo (and sympy with it), 1.2-1.5 s on the 2-core test machine, which each
    trial process otherwise paid in its probe's first model build. The import starts no thread. The
    names are torch_compat's (private modules live there), the list the forkserver preloads too."""
    for module in preloaded_torch_modules():
        importlib.import_module(module)


def warm_up(spec: dict) -> None:
    from hpo.hardware import torch_threads  # imports torch: here, not when the module loads
    from hpo.workloads.catalog import create_workload

    # The tokenizers library's own threads would make every trial process warn that it was forked.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # One thread while warming up; the trial processes' setting after, as each creates its own pool.
    with torch_threads(1):
        workload = create_workload(spec["workload"], spec["options"])
        workload.bind_training(spec["training"])
        workload.build_model(spec["attention"])
        preload_lazy_imports()


_spec = os.environ.pop(WARMUP_ENV, None)  # popped: the trial processes forked from here skip it
if _spec:
    try:
        warm_up(json.loads(_spec))
    except Exception as exc:  # noqa: BLE001 - a warm-up is an optimisation; the trial reports real errors
        first = (str(exc).splitlines() or [""])[0][:200]
        _log.warning(f"hpo: warming the trial processes failed ({type(exc).__name__}: {first}); each trial loads its own data")
