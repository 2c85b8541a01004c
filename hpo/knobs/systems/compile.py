"""`systems.compile`: torch.compile the model, `false` or an inductor mode.

Applied by its hook, `hpo.knobs.compiled_graphs.CompileHook`, which wraps the model the step calls,
after every other knob changed it (with the study's `compile_backend`).
Observed as the graphs the compile backend received during the step: a trial labelled compiled ran
compiled graphs, and Dynamo's quiet fallback to eager past its recompile limit is an error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from hpo.knobs.knob import HfPart, Knob, LightningPart, LoopPart, Mismatch, Seen, by_name

__all__ = ["COMPILE_SPECS", "KNOB", "CompileSpec"]


@dataclass(frozen=True, kw_only=True)
class CompileSpec:
    """A torch.compile mode (`compile: false` is the knob off, not a mode)."""

    name: str


COMPILE_SPECS: dict[str, CompileSpec] = by_name(
    CompileSpec(name="default"), CompileSpec(name="reduce-overhead"), CompileSpec(name="max-autotune")
)


class Compile(Knob):
    name = "compile"
    help = "torch.compile the model: false, or an inductor mode (default, reduce-overhead, max-autotune)"
    position = 50
    applies_to = "model"
    hook = "hpo.knobs.compiled_graphs:COMPILE_HOOK"
    specs = COMPILE_SPECS
    default = False
    reference = False
    value_type = bool | str
    gpu_check_values = (False, "default")
    observed_fields = {"compile": (bool, ...), "compiled_graphs": (int, ...)}

    @property
    def values(self) -> tuple:  # type: ignore[override]
        """Every value with a spec: a spec added to COMPILE_SPECS is an allowed value."""
        return (
            False,
            *COMPILE_SPECS,
        )

    def value_schema(self) -> Any:
        return Literal[False] | Literal[tuple(COMPILE_SPECS)]  # type: ignore[valid-type]

    def observe(self, evidence: Any) -> dict[str, Any]:
        return {"compile": evidence.graphs.graphs > 0, "compiled_graphs": evidence.graphs.graphs}

    def mismatches(self, asked: Any, observed: dict[str, Any], knobs: Any) -> list[Mismatch]:
        if observed["compile"] == bool(asked):
            return []
        return [Mismatch("compile", asked, observed["compile"], f"asked {asked}, compiled graphs: {observed['compiled_graphs']}")]

    def ran(self, seen: Seen) -> Any:
        """The inductor mode the observed compiled graphs ran (the config's), or False."""
        if seen.observed.get("compile") is None:
            return None
        return (seen.systems.get("compile") or "default") if seen.observed["compile"] else False

    def python_loop(self, w: Any) -> LoopPart:
        mode = w.knobs["compile"]
        if mode and w.sharded:
            return _per_block_loop_part(f"backend={w.compile_backend!r}, mode={mode!r}")
        return LoopPart(forward=f"torch.compile(model, backend={w.compile_backend!r}, mode={mode!r})" if mode else None)

    def hf(self, w: Any) -> HfPart:
        mode = w.knobs["compile"]
        args: dict[str, Any] = {"torch_compile": bool(mode)}
        if mode:
            args.update(torch_compile_backend=w.compile_backend, torch_compile_mode=mode)
        return HfPart(args=args)

    def lightning(self, w: Any) -> LightningPart:
        mode = w.knobs["compile"]
        if not mode:
            return LightningPart()
        return LightningPart(
            notes=[
                f"# compile: Lightning has no flag; torch.compile(model, backend={w.compile_backend!r}, mode={mode!r}) before fit"
            ]
        )


def _per_block_loop_part(arguments: str) -> LoopPart:
    """compile as the trial's FSDP2 ranks ran it (`hpo.parallel.rank_compile`): each sharded block's
    forward, not the sharded root, whose compile hands the backend no graph in torch 2.13."""
    return LoopPart(
        setup=[
            "# compile under FSDP2: each fully_shard-ed block's forward, inside FSDP2's hooks, as torchtitan does;",
            "# compiling the sharded root compiles nothing (torch 2.13); the embedding, head and loss run eager",
            "from torch.distributed.fsdp import FSDPModule",
            "for block in [m for m in model.modules() if isinstance(m, FSDPModule) and m is not model]:",
            f"    block.forward = torch.compile(block.forward, {arguments})",
        ]
    )


KNOB = Compile()
