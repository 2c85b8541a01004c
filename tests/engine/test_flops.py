"""Model FLOPs are counted on a real step, attention included, and match the analytic estimate."""

from __future__ import annotations

import pytest
import torch

from hpo.engine import model_flops_per_sample
from hpo.workloads.catalog import create_workload


@pytest.mark.parametrize("n_layers,d_model,seq_len", [(1, 32, 16), (2, 64, 32)])
def test_causal_lm_flops_match_6n_tokens_plus_attention(n_layers, d_model, seq_len):
    options = {"n_layers": n_layers, "d_model": d_model, "n_heads": 4, "seq_len": seq_len, "corpus_bytes": 20_000}
    workload = create_workload("causal_lm", options)
    batch = next(workload.train_batches(4, seed=0))
    counted = model_flops_per_sample(workload, batch)
    # Matmul weights: per block qkv 3d^2, proj d^2, mlp 8d^2; then the 256-way head.
    n_matmul = n_layers * 12 * d_model**2 + 256 * d_model
    # Eager attention computes q k^T and p v in full: 2 * 2 * s * d per token forward, x3 with backward.
    attention = n_layers * 12 * seq_len * d_model
    estimate = seq_len * (6 * n_matmul + attention)
    assert counted == pytest.approx(estimate, rel=0.02)


def test_count_leaves_the_rng_as_it_found_it():
    workload = create_workload("causal_lm", {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16, "corpus_bytes": 20_000})
    batch = next(workload.train_batches(2, seed=0))
    torch.manual_seed(7)
    state = torch.random.get_rng_state()
    model_flops_per_sample(workload, batch)
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.parametrize(
    "name,options",
    [
        ("causal_lm", {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16, "corpus_bytes": 20_000}),
        ("text_classification", {"model": "tiny", "max_length": 16, "n_train": 64, "n_eval": 16}),
    ],
)
def test_flops_per_sample_do_not_depend_on_the_batch_they_are_counted_on(name, options):
    """Trials count on FLOP_COUNT_SAMPLES samples, not their whole batch."""
    from hpo.trial._speed_record import FLOP_COUNT_SAMPLES

    workload = create_workload(name, options)
    small = model_flops_per_sample(workload, next(workload.train_batches(FLOP_COUNT_SAMPLES, seed=0)))
    assert small == model_flops_per_sample(workload, next(workload.train_batches(16, seed=0))) and small > 0
