"""`systems.persistent_workers`: the DataLoader's workers live across epochs instead of restarting."""

from __future__ import annotations

from hpo.knobs.knob import LoaderKnob

__all__ = ["KNOB"]


class PersistentWorkers(LoaderKnob):
    name = "persistent_workers"
    help = "loader workers live across epochs instead of starting again; needs num_workers > 0"
    position = 150
    values = (False, True)
    default = False
    reference = False
    value_type = bool
    schema = bool
    needs_workers = True
    hf_argument = "dataloader_persistent_workers"


KNOB = PersistentWorkers()
