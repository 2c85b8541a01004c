"""`systems.parallel.bucket_cap_mb` (DDP): the size of a gradient all-reduce bucket, in MiB (torch's
default 25). Applied by `hpo.parallel.wrap`; observed as the sizes of one step's all-reduces, each a
bucket (`hpo.parallel.observe.bucket_sizes`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from hpo.knobs.knob import ParallelKnob

__all__ = ["KNOB"]


class BucketCapMb(ParallelKnob):
    name = "bucket_cap_mb"
    help = "DDP: the size of a gradient all-reduce bucket, in MiB"
    position = 20
    values_text = "a number of MiB above 0"
    default = 25.0
    reference = 25.0
    value_type = float
    schema = Annotated[float, Field(gt=0)]
    strategy = "ddp"

    def contradiction(self, requested: Any, seen: dict) -> str | None:
        """DDP closes a bucket as soon as it holds at least the cap, and keeps each dtype's gradients
        in buckets of their own: no bucket exceeds the cap by more than one gradient, and every bucket
        but each dtype's last holds at least the cap, so there are at most total / cap + 1 per dtype."""
        ceiling = requested + seen["largest_gradient_mb"]
        if seen["largest_all_reduce_mb"] > ceiling:
            return (
                f"bucket_cap_mb {requested:g} requested, but an all-reduce carried {seen['largest_all_reduce_mb']:.4g} MB, "
                f"above the cap plus the largest gradient ({ceiling:.4g} MB)"
            )
        most = int(seen["all_reduced_mb"] // requested) + len(seen["dtypes"])
        if seen["all_reduce_calls"] > most:
            return (
                f"bucket_cap_mb {requested:g} requested, but {seen['all_reduce_calls']} all-reduces carried "
                f"{seen['all_reduced_mb']:.4g} MB, where buckets of at least the cap make at most {most}"
            )
        return None


KNOB = BucketCapMb()
