"""torch.compile knob, with a recording backend: every graph Dynamo hands to the real backend is
summarised first, so the trial can show that compiled graphs ran and what dtypes they computed in."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn

from hpo.torch_compat import dynamo_backend, inductor_backend

# Ops whose output dtype shows the autocast precision; autocast casts exactly this class of ops.
MATMUL_OPS = frozenset({"linear", "matmul", "mm", "addmm", "conv1d", "conv2d"})


@dataclass
class GraphRecord:
    """What the compiled graphs contained, gathered at compile time."""

    graphs: int = 0
    nodes: int = 0
    checkpoint_regions: int = 0
    softmax_nodes: int = 0
    sdpa_nodes: int = 0
    matmul_dtypes: Counter = field(default_factory=Counter)

    def add(self, gm: torch.fx.GraphModule) -> None:
        self.graphs += 1
        for module in gm.modules():  # checkpointed regions live in nested subgraphs
            if isinstance(module, torch.fx.GraphModule):
                self._scan(module.graph)

    def _scan(self, graph: torch.fx.Graph) -> None:
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            self.nodes += 1
            name = getattr(node.target, "__name__", str(node.target))
            if name == "tag_activation_checkpoint":
                self.checkpoint_regions += 1
            if name == "softmax":
                self.softmax_nodes += 1
            if name == "scaled_dot_product_attention":
                self.sdpa_nodes += 1
            value = node.meta.get("example_value")
            if name in MATMUL_OPS and isinstance(value, torch.Tensor):
                self.matmul_dtypes[str(value.dtype).removeprefix("torch.")] += 1


def _inner_backend(mode: str, backend: str):
    if backend == "inductor":
        # The same wrapper torch.compile(mode=...) builds, so the mode's inductor options apply.
        return inductor_backend(mode)
    return dynamo_backend(backend)


def compile_model(model: nn.Module, mode: str, backend: str, record: GraphRecord) -> nn.Module:
    """Compile `model` with `mode`; graphs are recorded into `record` as they are compiled."""
    inner = _inner_backend(mode, backend)

    def recording_backend(gm: torch.fx.GraphModule, example_inputs):
        record.add(gm)
        return inner(gm, example_inputs)

    return torch.compile(model, backend=recording_backend)
