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
import torch

from hpo.knobs.attention_kernels import pinned_kernel
from hpo.knobs.compiled_graphs import GraphRecord, compile_model

TAGS_SEEN = "hpo_test_records_cache_key_tag"
_tags: list[str] = []


def _records_cache_key_tag(gm: torch.fx.GraphModule, example_inputs):
    """A backend that notes the tag torch's caches would be keyed with while it compiles."""
    _tags.append(torch.compiler.config.cache_key_tag)
    return gm


if TAGS_SEEN not in torch._dynamo.list_backends(exclude_tags=()):
    torch._dynamo.register_backend(_records_cache_key_tag, name=TAGS_SEEN)


def _compiled_tag(attention: str, user_tag: str = "") -> str:
    # torch's own patch, not pytest's monkeypatch: monkeypatch's undo deletes the entry, and torch's
    # config module then hides it ("does not exist") from every later test of the process.
    with torch.compiler.config.patch(cache_key_tag=user_tag):
        _tags.clear()
        knobs = {
            "precision": "fp32",
            "attention": attention,
            "optimizer": "fused",
            "grad_checkpointing": False,
            "compile": "default",
        }
        model = compile_model(torch.nn.Linear(4, 4), "default", TAGS_SEEN, GraphRecord(), knobs=knobs)
        with pinned_kernel(attention):
            model(torch.randn(2, 4))
        assert torch.compiler.config.cache_key_tag == user_tag  # restored after the compile
    (tag,) = _tags
    return tag


def test_each_graph_compiles_under_a_cache_key_tag_of_the_knobs_and_the_enabled_sdpa_kernels():
    math, unpinned = _compiled_tag("sdpa_math"), _compiled_tag("sdpa")
    assert math.endswith(";sdpa:math") and "attention=sdpa_math" in math and "precision=fp32" in math
    assert "flash" in unpinned.split(";sdpa:")[1] and math != unpinned
    assert _compiled_tag("sdpa_math", user_tag="mine") == f"mine|{math}"  # the user's tag kept


# One compiled causal_lm step per attention value named on the command line, in this process, each
# on its own AssembledModel as trials are: the first call compiles, the second is observed.
CHILD = """
import json, sys, torch
from hpo.config.trial import Knobs, TrainingConfig
from hpo.engine._assembly import AssembledModel
from hpo.evidence.capture import capture_step
from hpo.evidence.observe import observed_knobs
from hpo.workloads.catalog import create_workload

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
