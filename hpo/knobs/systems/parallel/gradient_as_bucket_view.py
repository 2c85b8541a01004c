"""`systems.parallel.gradient_as_bucket_view` (DDP): the gradients are views into the all-reduce
buckets instead of copies, which saves their memory. Applied by `hpo.parallel.wrap`; observed as how
many gradients live in the storage an all-reduce ran on (`hpo.parallel.observe.grads_in_buckets`)."""

from __future__ import annotations

from typing import Any

from hpo.knobs.knob import ParallelKnob

__all__ = ["KNOB"]


class GradientAsBucketView(ParallelKnob):
    name = "gradient_as_bucket_view"
    help = "DDP: gradients are views into the all-reduce buckets instead of copies"
    position = 30
    values = (False, True)
    default = False
    reference = False
    value_type = bool
    schema = bool
    strategy = "ddp"

    def contradiction(self, requested: Any, seen: dict) -> str | None:
        expected = seen["gradients"] if requested else 0
        if seen["gradients"] and seen["gradients_in_buckets"] == expected:
            return None
        return (
            f"gradient_as_bucket_view {requested} requested, but {seen['gradients_in_buckets']} of "
            f"{seen['gradients']} gradients lived in the all-reduced buckets' storage"
        )


KNOB = GradientAsBucketView()
