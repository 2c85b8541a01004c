"""A workload whose compile is dropped on one rank only, for the check that a 2-rank compiled
trial compiled on every rank (loaded by name in the spawned ranks: `rank_compile_faults:...`)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from hpo.workloads.causal_lm import CausalLM

EAGER_RANK = 1


class CompileDroppedOnRank1(CausalLM):
    """The quickstart causal LM; on rank 1 its forward is excluded from Dynamo (as a model whose
    forward is `torch._dynamo.disable`d, or a rank that silently fell back to eager): nothing
    reaches the compile backend there, while rank 0 compiles as asked."""

    def build_model(self, attention: str) -> nn.Module:
        model = super().build_model(attention)
        if dist.is_initialized() and dist.get_rank() == EAGER_RANK:
            model.forward = torch._dynamo.disable(model.forward)
        return model
