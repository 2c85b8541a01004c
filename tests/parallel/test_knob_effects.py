"""Each parallel knob's check against what its evidence showed, and the share of a step that
collectives were in flight, on made-up observations (the real ones: test_parallel_records.py)."""

from __future__ import annotations

import pytest
from parallel_ranks import two_rank_config

from hpo.knobs.systems.parallel import PARALLEL_KNOBS
from hpo.parallel.collective_time import in_flight_share, is_collective
from hpo.parallel.effects import contradiction
from hpo.parallel.observe import MB, blocks_gathered, bucket_sizes

# Each knob's check, from its module.
bucket_cap_contradiction = PARALLEL_KNOBS["bucket_cap_mb"].contradiction
bucket_view_contradiction = PARALLEL_KNOBS["gradient_as_bucket_view"].contradiction
reshard_contradiction = PARALLEL_KNOBS["reshard_after_forward"].contradiction


def test_buckets_within_the_cap_agree_and_one_bucket_of_everything_does_not():
    # 4 fp32 gradients of 0.25 MB: a 0.5 MB cap makes 2 buckets of 0.5 MB.
    gradient = int(0.25 * MB)
    capped = bucket_sizes([("float32", 2 * gradient // 4)] * 2, gradient)
    assert capped == {
        "all_reduce_calls": 2,
        "dtypes": ["float32"],
        "largest_all_reduce_mb": 0.5,
        "all_reduced_mb": 1.0,
        "largest_gradient_mb": 0.25,
    }
    assert bucket_cap_contradiction(0.5, capped) is None
    whole = bucket_sizes([("float32", 4 * gradient // 4)], gradient)
    assert bucket_cap_contradiction(0.5, whole) == (
        "bucket_cap_mb 0.5 requested, but an all-reduce carried 1 MB, above the cap plus the largest gradient (0.75 MB)"
    )


def test_each_dtype_s_last_bucket_may_be_short_of_the_cap():
    # Under a 0.5 MB cap: fp32 buckets of 0.5 and 0.1 MB, and a bf16 one of 0.1 MB. One dtype's
    # gradients would make at most 0.7 // 0.5 + 1 = 2 buckets; each dtype has a short last one.
    gradient, short = int(0.25 * MB), int(0.1 * MB)
    mixed = bucket_sizes([("float32", gradient // 2), ("float32", short // 4), ("bfloat16", short // 2)], gradient)
    assert mixed["dtypes"] == ["bfloat16", "float32"]
    assert bucket_cap_contradiction(0.5, mixed) is None
    assert bucket_cap_contradiction(0.5, {**mixed, "dtypes": ["float32"]}) is not None


def test_more_buckets_than_a_larger_cap_allows_contradict_it():
    gradient = int(0.25 * MB)
    one_per_gradient = bucket_sizes([("bfloat16", gradient // 2)] * 4, gradient)
    assert bucket_cap_contradiction(0.25, one_per_gradient) is None
    assert bucket_cap_contradiction(1.0, one_per_gradient) == (
        "bucket_cap_mb 1 requested, but 4 all-reduces carried 1 MB, where buckets of at least the cap make at most 2"
    )


@pytest.mark.parametrize(
    ("requested", "inside", "agrees"), [(True, 3, True), (False, 0, True), (True, 0, False), (False, 3, False)]
)
def test_gradients_in_the_buckets_agree_with_gradient_as_bucket_view(requested, inside, agrees):
    why = bucket_view_contradiction(requested, {"gradients": 3, "gradients_in_buckets": inside})
    assert (why is None) == agrees
    if not agrees:
        assert (
            why
            == f"gradient_as_bucket_view {requested} requested, but {inside} of 3 gradients lived in the all-reduced buckets' storage"
        )


def test_no_gradient_seen_is_no_proof_either_way():
    assert bucket_view_contradiction(False, {"gradients": 0, "gradients_in_buckets": 0}) is not None


@pytest.mark.parametrize(
    ("requested", "after_forward", "agrees"),
    [(True, [False, False], True), (False, [True, True], True), (True, [True, False], False), (False, [False, True], False)],
)
def test_blocks_gathered_after_forward_agree_with_reshard_after_forward(requested, after_forward, agrees):
    assert (reshard_contradiction(requested, blocks_gathered(after_forward)) is None) == agrees


def test_the_first_rank_whose_effect_contradicts_is_named_and_an_inapplicable_knob_is_skipped():
    config = two_rank_config("fsdp", reshard_after_forward=True)
    agrees = {"bucket_cap_mb": None, "gradient_as_bucket_view": None, "reshard_after_forward": blocks_gathered([False, False])}
    differs = {**agrees, "reshard_after_forward": blocks_gathered([True, False])}
    assert contradiction([{"parallel_observed": agrees}] * 2, config.parallel) is None
    verdict = contradiction([{"parallel_observed": agrees}, {"parallel_observed": differs}], config.parallel)
    assert str(verdict) == (
        "mismatch: rank 1: systems.parallel.reshard_after_forward True requested, but 1 of 2 blocks still held their "
        "gathered parameters after forward"
    )
    assert verdict.implicates == ()


def test_the_in_flight_share_merges_overlapping_collectives_and_clips_them_to_the_step():
    step = (100, 200)
    assert in_flight_share(step, []) == (0.0, 0)
    # 90-120 clipped to 100-120; 110-150 overlaps it; 180-250 clipped to 180-200.
    assert in_flight_share(step, [(110, 150), (90, 120), (180, 250)]) == (0.7, 70)
    assert in_flight_share(step, [(120, 130), (110, 190)]) == (0.8, 80)


def test_collectives_are_gloo_spans_and_nccl_kernels_not_nccl_launches():
    assert is_collective("gloo:all_reduce")
    assert is_collective("ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    assert not is_collective("nccl:all_reduce")  # the CPU side: the launch only
    assert not is_collective("aten::mm")
