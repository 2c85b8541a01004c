"""torch.compile under ranks, as PyTorch and torchtitan run it with each strategy, recorded in the
assembled model's `GraphRecord` as a one-process compiled trial is.

DDP: the DDP-wrapped module is compiled (PyTorch's "DDP + torch.compile"): Dynamo's DDPOptimizer
splits the graph at the bucket boundaries, so a bucket's all-reduce still starts while the backward
of the graphs before it runs.
FSDP2: each block's forward is compiled, and FSDP2's hooks around it (the all-gathers and
reduce-scatters) run eager, as torchtitan compiles each transformer block and shards it. Compiling
the sharded root instead compiles nothing in torch 2.13: no graph reaches the backend, every step
runs eager. The embedding, head and loss outside the blocks then run eager too (`scope: blocks`).

A rank whose steps ran no compiled graph while the trial asked for one ends the trial `mismatch`
(`checked_compile`), and the launcher compares the ranks' records (`compiled` in `AGREED`)."""

from __future__ import annotations

import torch
from torch import nn

from hpo.config.trial import Knobs
from hpo.engine import AssembledModel
from hpo.errors import TrialRejected
from hpo.knobs.compiled_graphs import compile_model, recording_backend
from hpo.verdicts import Kind, Verdict

__all__ = ["checked_compile", "compile_wrapped"]


def compile_wrapped(wrapped: nn.Module, assembled: AssembledModel, knobs: Knobs, strategy: str) -> nn.Module:
    """The module forward runs through: `wrapped` (DDP's module or FSDP2's sharded root), compiled
    as the strategy allows when the trial is, its graphs recorded into `assembled.graphs`."""
    if not knobs.compile:
        return wrapped
    backend, values = assembled.training.compile_backend, knobs.as_dict()
    if strategy == "ddp":
        return compile_model(wrapped, knobs.compile, backend, assembled.graphs, knobs=values)
    blocks = assembled.workload.checkpoint_blocks(assembled.model)
    if not blocks:
        detail = (
            f"systems.compile {knobs.compile!r} under FSDP2 compiles each block the workload names, but "
            f"{type(assembled.workload).__name__}.checkpoint_blocks names none; use ddp, or compile: false"
        )
        raise TrialRejected(Verdict.make(Kind.INCOMPATIBLE, detail, [("compile", knobs.compile)]))
    compiling = recording_backend(assembled.model, knobs.compile, backend, assembled.graphs, knobs=values)
    for block in blocks:  # the forward, checkpointed or not, that the block's FSDP2 hooks surround
        block.forward = torch.compile(block.forward, backend=compiling)
    return wrapped


def checked_compile(assembled: AssembledModel, rank: int) -> dict[str, int]:
    """What this rank's compile backend received: graphs, those compiled in train mode, and the
    checkpointed regions inside them (recomputed in backward). A compiled trial whose rank trained
    no compiled graph ran eager there, not what it asked: a `mismatch` naming the rank."""
    graphs, asked = assembled.graphs, assembled.knobs.compile
    compiled = {"graphs": graphs.graphs, "train_graphs": graphs.train_graphs, "checkpoint_regions": graphs.checkpoint_regions}
    if asked and compiled["train_graphs"] == 0:
        detail = (
            f"rank {rank}: systems.compile {asked!r} asked, but no graph was compiled in training "
            f"on this rank ({compiled}): its steps ran eager"
        )
        raise TrialRejected(Verdict.make(Kind.MISMATCH, detail))
    return compiled
