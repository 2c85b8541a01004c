"""A compiled trial runs graphs compiled for its own knobs, through torch's on-disk compile caches too.

torch's AOTAutograd cache is keyed on Dynamo's graph, in which scaled_dot_product_attention is one
call whatever kernel serves it: on the H200 (2026-11-26) a graph compiled for cuDNN attention served
a trial pinned to flash. On CPU the same crossing happens between the unpinned `sdpa` (the CPU flash
kernel) and `sdpa_math`, in processes that share TORCHINDUCTOR_CACHE_DIR.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# One compiled causal_lm step per attention value named on the command line, in this process, each
# on its own AssembledModel as trials are: the first call compiles, the second is observed.
CHILD = """
import json, sys, torch
from hpo.config.trial import Knobs, TrainingConfig
from hpo.engine.assembly import AssembledModel
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import observed_knobs
from hpo.workloads.registry import create_workload

seen = []
for attention in sys.argv[1:]:
    torch.manual_seed(0)
    knobs = Knobs(precision="fp32", attention=attention, optimizer="forloop", compile="default")
    training = TrainingConfig(lr=1e-3, batch_size=4, max_steps=2, compile_backend="inductor")
    workload = create_workload("causal_lm", dict(n_layers=1, n_heads=2, d_model=32, seq_len=16, corpus_bytes=20000))
    assembled = AssembledModel(workload, knobs, training, torch.device("cpu"))
    batches = workload.train_batches(4, 0)
    assembled.model.train()
    assembled.forward_backward(assembled.move(next(batches)))
    assembled.optimizer_step()
    with capture_step(assembled) as evidence:
        assembled.forward_backward(assembled.move(next(batches)))
        assembled.optimizer_step()
    seen.append(observed_knobs(evidence)["attention"])
print(json.dumps(seen))
"""


def _observed(cache: Path, *attention: str) -> list[str]:
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        "TORCHINDUCTOR_CACHE_DIR": str(cache),
        # torch's defaults, stated: the test is about these caches.
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
        "KINETO_LOG_LEVEL": "5",
    }
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    run = subprocess.run([sys.executable, "-c", CHILD, *attention], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_graph_compiled_for_one_kernel_never_serves_another_through_a_shared_cache(tmp_path):
    cache = tmp_path / "inductor"
    assert _observed(cache, "sdpa") == ["sdpa_flash"]  # CPU's SDPA dispatch picks flash; cached now
    # A later process pinned to the math kernel, then (same process) unpinned again.
    assert _observed(cache, "sdpa_math", "sdpa") == ["sdpa_math", "sdpa_flash"]
