"""`systems.pin_memory`: the DataLoader copies batches into page-locked memory, so that the copy to
a CUDA device can overlap compute. It does nothing without a CUDA device (torch warns and skips it),
so there it is not asked and its observation is null. Observed as whether every batch arrived
pinned (`loader_observed.pinned`)."""

from __future__ import annotations

from typing import Any

from hpo.knobs.knob import LoaderKnob, Mismatch, Seen

__all__ = ["KNOB"]


class PinMemory(LoaderKnob):
    name = "pin_memory"
    help = "the DataLoader pins batches in page-locked memory (CUDA only: elsewhere it does nothing)"
    position = 130
    values = (False, True)
    default = False
    reference = False
    value_type = bool
    schema = bool
    hf_argument = "dataloader_pin_memory"

    def loader_mismatches(self, asked: Any, loader_observed: dict[str, Any]) -> list[Mismatch]:
        pinned = loader_observed.get("pinned")
        if pinned is None or pinned == asked:  # null: pinning does nothing here, nothing to contradict
            return []
        return [Mismatch(self.name, asked, pinned, f"asked {asked}, batches arrived pinned: {pinned}")]

    def ran(self, seen: Seen) -> Any:
        """Pinned as the batches arrived; where pinning does nothing (no CUDA device), not pinned."""
        pinned = (seen.loader or {}).get("pinned")
        return bool(pinned) if pinned is not None else False


KNOB = PinMemory()
