"""Eager attention's causal mask under torch.compile and gradient checkpointing: the mask cache is
filled outside Dynamo's trace, so every checkpointed block compiles (torch 2.13 refused the cache
write inside a checkpointed region and ran the model eager: no graph reached the backend)."""

from __future__ import annotations

import torch

from hpo.config.trial import Knobs, TrainingConfig
from hpo.engine import AssembledModel
from hpo.knobs.attention_kernels import causal_mask, eager_attention
from hpo.workloads.catalog import create_workload

# The quickstart's causal LM, tiny: its blocks call eager attention with is_causal=True.
CAUSAL_LM = {"d_model": 16, "n_layers": 3, "n_heads": 2, "seq_len": 16, "corpus_bytes": 20000}
KNOBS = Knobs(compile="default", attention="eager", grad_checkpointing=True, optimizer="forloop", precision="fp32")


def test_whole_model_compile_keeps_every_checkpointed_block_in_one_graph():
    training = TrainingConfig(lr=1e-3, batch_size=4, max_steps=2, eval_every=3, compile_backend="eager")
    assembled = AssembledModel(create_workload("causal_lm", CAUSAL_LM), KNOBS, training, torch.device("cpu"))
    assembled.forward_backward(next(assembled.workload.train_batches(4, 0)))
    graphs = assembled.graphs
    # One graph: no break split the model; one checkpoint region per block, each with its softmax.
    assert (graphs.graphs, graphs.train_graphs) == (1, 1), graphs
    assert graphs.checkpoint_regions == graphs.softmax_nodes == CAUSAL_LM["n_layers"], graphs
    # The checkpointed forward counts only its runs outside a compiled graph: none.
    assert (assembled.recompute.forward_runs, assembled.recompute.backward_runs) == (0, 0)


def test_compiled_causal_mask_equals_the_cached_one():
    q, k, v = torch.randn(3, 2, 2, 5, 8).unbind(0)
    compiled = torch.compile(lambda q, k, v: eager_attention(q, k, v, is_causal=True), backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v), eager_attention(q, k, v, is_causal=True), rtol=0, atol=0)
    assert causal_mask(5, 5, q.device) is causal_mask(5, 5, q.device)  # eager calls still share one mask
