"""`systems.prefetch_factor`: batches each DataLoader worker keeps ready (null: torch's default, 2)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from hpo.knobs.knob import LoaderKnob

__all__ = ["KNOB"]


class PrefetchFactor(LoaderKnob):
    name = "prefetch_factor"
    help = "batches each loader worker keeps ready; null: torch's default (2); needs num_workers > 0"
    position = 140
    default = None
    reference = None
    values_text = "an integer of at least 1, or null"
    value_type = int | None
    schema = Annotated[int, Field(ge=1)] | None
    needs_workers = True
    hf_argument = "dataloader_prefetch_factor"


KNOB = PrefetchFactor()
