"""torch.compile knob, with a recording backend: every graph Dynamo hands to the real backend is
summarised first, so the trial can show that compiled graphs ran and what dtypes they computed in.

The backend also compiles each graph under a cache-key tag naming the trial's knobs and the SDPA
kernels enabled at that moment. torch's on-disk caches (AOTAutograd's, keyed on Dynamo's graph, in
which `scaled_dot_product_attention` is one call whatever kernel serves it) do not hash the SDPA
kernel selection: without the tag, a graph compiled under one kernel served a process pinned to
another (the H200 run of 2026-11-26, bf16 + sdpa_flash "ran sdpa_cudnn+sdpa_flash").

In one process, Dynamo's own cache does not guard on the SDPA kernel selection either (a pin set
outside the compiled region is not traced); but each model is compiled with a recording backend of
its own, and Dynamo runs no graph compiled for another backend (its backend-match guard), so the
models of two trials never share graphs.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from hpo.knobs.model_hooks import Assembly, ModelHook
from hpo.torch_compat import compile_cache_key_tag, dynamo_backend, fail_on_recompile_limit, inductor_backend

# Ops whose output dtype shows the autocast precision; autocast casts exactly this class of ops.
MATMUL_OPS = frozenset({"linear", "matmul", "mm", "addmm", "conv1d", "conv2d"})
# Recompiles allowed per frame: train/eval, one frame per block when the model has graph breaks.
RECOMPILE_LIMIT = 64


@dataclass
class GraphRecord:
    """What the compiled graphs contained, gathered at compile time."""

    graphs: int = 0
    train_graphs: int = 0  # graphs compiled while the model was in train mode
    nodes: int = 0
    checkpoint_regions: int = 0
    softmax_nodes: int = 0
    sdpa_nodes: int = 0
    matmul_dtypes: Counter = field(default_factory=Counter)

    def add(self, gm: torch.fx.GraphModule, training: bool) -> None:
        self.graphs += 1
        self.train_graphs += int(training)
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


def enabled_sdpa_kernels() -> str:
    """The SDPA kernels the dispatcher may choose right now (the global flags `sdpa_kernel` sets,
    read by the CPU and CUDA dispatch alike)."""
    flags = {
        "flash": torch.backends.cuda.flash_sdp_enabled(),
        "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
        "math": torch.backends.cuda.math_sdp_enabled(),
    }
    return ",".join(name for name, on in flags.items() if on)


def graph_cache_tag(knobs: Mapping[str, object]) -> str:
    """What torch's compile caches must also be keyed on: every knob value of the trial, and the
    SDPA kernels enabled while the graph compiles (so a pin set outside hpo counts too)."""
    values = ",".join(f"{name}={knobs[name]}" for name in sorted(knobs))
    return f"hpo-knobs:{values};sdpa:{enabled_sdpa_kernels()}"


def compile_model(model: nn.Module, mode: str, backend: str, record: GraphRecord, *, knobs: Mapping[str, object]) -> nn.Module:
    """Compile `model` with `mode`; graphs are recorded into `record` as they are compiled, each
    compiled under the cache-key tag of `knobs` (the trial's knob values, by name)."""
    return torch.compile(model, backend=recording_backend(model, mode, backend, record, knobs=knobs))


def recording_backend(model: nn.Module, mode: str, backend: str, record: GraphRecord, *, knobs: Mapping[str, object]):
    """The compile backend `compile_model` hands torch.compile, for a caller that compiles a part of
    `model` (a block's forward) itself; `model.training` says which mode each graph was compiled in."""
    inner = _inner_backend(mode, backend)

    def recording(gm: torch.fx.GraphModule, example_inputs):
        record.add(gm, model.training)
        # AOTAutograd computes its cache key inside this call; the backward graph compiled later
        # is keyed by Inductor on its own aten ops, in which the kernel is explicit.
        with compile_cache_key_tag(graph_cache_tag(knobs)):
            return inner(gm, example_inputs)

    return recording


class CompileHook(ModelHook):
    """`systems.compile` applied: the module the step calls is compiled, last (its graphs trace what
    the other knobs made of the model), and forward runs where Dynamo's quiet fallback to eager past
    its recompile limit is an error, so a trial labelled compiled ran compiled."""

    def wrap_forward(self, assembly: Assembly, value: bool | str, forward: nn.Module) -> nn.Module:
        if not value:
            return forward
        return compile_model(forward, value, assembly.training.compile_backend, assembly.graphs, knobs=assembly.values)

    def around_forward(self, assembly: Assembly, value: bool | str) -> contextlib.AbstractContextManager:
        return fail_on_recompile_limit(RECOMPILE_LIMIT) if value else contextlib.nullcontext()


COMPILE_HOOK = CompileHook()
