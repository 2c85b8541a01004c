"""The knobs benchmark's saved-activation figure: what autograd keeps for backward, and what checkpointing lowers."""

from __future__ import annotations

import torch
from conftest import toy_config

from benchmarks.saved_memory import saved_activations
from hpo.config.trial import Knobs
from hpo.engine import AssembledModel
from hpo.workloads.catalog import create_workload


def saved_mb(grad_checkpointing: bool) -> float:
    knobs = Knobs(precision="fp32", attention="eager", optimizer="forloop", grad_checkpointing=grad_checkpointing)
    config = toy_config(knobs, d_model=64, seq_len=64, n_blocks=4)
    torch.manual_seed(0)
    assembled = AssembledModel(
        create_workload(config.workload, config.workload_options), config.knobs, config.training, torch.device("cpu")
    )
    batch = next(assembled.workload.train_batches(16, 0))
    with saved_activations(exclude=assembled.model.parameters()) as saved:
        assembled.forward_backward(batch)
    return saved.peak / 2**20


def test_checkpointing_lowers_the_saved_activations():
    plain, checkpointed = saved_mb(False), saved_mb(True)
    assert plain > 0
    assert checkpointed < 0.6 * plain, (plain, checkpointed)


def test_saved_bytes_count_a_shared_storage_once_and_skip_excluded_tensors():
    weight = torch.randn(256, 256, requires_grad=True)  # 256 KiB, excluded
    x = torch.randn(64, 256, requires_grad=True)  # 64 KiB, saved by both matmuls
    with saved_activations(exclude=[weight]) as saved:
        ((x @ weight) + (x @ weight.T)).sum().backward()
    assert saved.peak == x.numel() * x.element_size()
    assert saved.live == 0 and not saved.refs  # backward freed what it used
