"""`systems.parallel.reshard_after_forward` (FSDP2): free each block's gathered parameters after its
forward (gathering them again for backward) instead of keeping them until backward. Applied by
`hpo.parallel.wrap`; observed as how many blocks still held their gathered parameters when their
forward ended (`hpo.parallel.observe.blocks_gathered`)."""

from __future__ import annotations

from typing import Any

from hpo.knobs.knob import ParallelKnob

__all__ = ["KNOB"]


class ReshardAfterForward(ParallelKnob):
    name = "reshard_after_forward"
    help = "FSDP2: free each block's gathered parameters after its forward, gathering them again for backward"
    position = 40
    values = (False, True)
    default = True
    reference = True
    value_type = bool
    schema = bool
    strategy = "fsdp"

    def contradiction(self, requested: Any, seen: dict) -> str | None:
        expected = 0 if requested else seen["blocks"]
        if seen["blocks"] and seen["blocks_gathered_after_forward"] == expected:
            return None
        return (
            f"reshard_after_forward {requested} requested, but {seen['blocks_gathered_after_forward']} of "
            f"{seen['blocks']} blocks still held their gathered parameters after forward"
        )


KNOB = ReshardAfterForward()
