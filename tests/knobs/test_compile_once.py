"""A compiled trial compiles once, in the mode it trains in: the graphs of its first compile serve
every training step (a graph for evaluation is the only other one).

On the H200 (2026-11-26) the probe compiled its compared step in eval mode and training compiled
again in train mode: two graphs and two compile times for one trial.
"""

from __future__ import annotations

import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.engine import AssembledModel, run_step
from hpo.trial._trainer import train
from hpo.verify.probing import run_probe
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")
KNOBS = Knobs(precision="fp32", attention="sdpa", optimizer="fused", compile="default")


def test_graphs_record_the_mode_they_were_compiled_in():
    config = toy_config(KNOBS, max_steps=4, eval_every=100)
    assembled = AssembledModel(create_workload(config.workload, config.workload_options), KNOBS, config.training, CPU)
    batch = next(assembled.workload.train_batches(16, 0))
    assembled.model.train()
    run_step(assembled, batch, step=0)
    first = assembled.graphs.train_graphs
    assert first >= 1 and assembled.graphs.graphs == first
    assembled.evaluate()  # eval mode and inference mode: graphs of their own, not train-mode ones
    assert assembled.graphs.graphs > first and assembled.graphs.train_graphs == first


def test_a_model_stepped_in_train_mode_trains_on_the_graphs_of_its_first_compile():
    config = toy_config(KNOBS, max_steps=6, eval_every=100)
    assembled = AssembledModel(create_workload(config.workload, config.workload_options), KNOBS, config.training, CPU)
    assembled.model.train()
    run_step(assembled, next(assembled.workload.train_batches(16, 0)), step=0)
    first = assembled.graphs.train_graphs
    train(assembled, config)
    assert assembled.graphs.train_graphs == first


def test_probe_and_training_compile_once_in_train_mode():
    config = toy_config(KNOBS, max_steps=6, eval_every=100)
    result = run_probe(create_workload(config.workload, config.workload_options), config, CPU, keep_model=True, timed=False)
    assert result.ok and result.model is not None, result
    graphs = result.model.graphs
    assert graphs.graphs == graphs.train_graphs >= 1  # the probe compiled in the mode training runs
    first = graphs.train_graphs
    train(result.model, config)
    assert graphs.train_graphs == first
