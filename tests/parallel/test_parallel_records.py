"""What a trial of ranks records beyond its losses, over real gloo on the CPU: the share of the
recorded step that collectives were in flight, read from the profiler, and MFU against N devices'
peak; and each parallel knob's effect, observed and judged (a knob dropped on its way to torch
ends the trial `mismatch`)."""

from __future__ import annotations

import functools

import pytest
import torch
from parallel_knob_drops import drop_knob, dropping_in_ranks
from parallel_ranks import late_rank, no_rank_left_behind, two_rank_config  # noqa: F401 (autouse)

from hpo.hardware import _peaks as peaks
from hpo.hardware._peaks import Peak
from hpo.parallel import run_ranks
from hpo.records import check_trial_attrs
from hpo.trial import _ranks as ranks
from hpo.trial import execute_ranks

pytestmark = pytest.mark.slow

DEADLINE_S = 300


def ok_outcome(config, **kwargs):
    outcome = run_ranks(config, deadline_s=DEADLINE_S, **kwargs)
    assert outcome.verdict.kind.value == "ok", str(outcome.verdict)
    return outcome


def test_one_rank_has_no_collective_in_flight_and_two_ranks_do():
    one = ok_outcome(two_rank_config("ddp", processes=1)).record()
    two = ok_outcome(two_rank_config("ddp")).record()
    assert one["wire"] == {}
    assert one["collective_share_per_rank"] == [0.0]
    assert "all_reduce" in two["wire"]
    assert all(0 < share <= 1 for share in two["collective_share_per_rank"])


def test_a_late_peer_keeps_the_collectives_in_flight_for_most_of_the_step():
    # Rank 0's step computes in well under a second even on a loaded host; its first collective
    # then waits the 2 s that rank 1 arrives late, in flight all that time.
    shares = ok_outcome(two_rank_config("ddp"), after_step=late_rank).record()["collective_share_per_rank"]
    assert shares[0] > 0.7, shares


def test_a_trial_of_ranks_records_mfu_against_n_devices_peak(monkeypatch):
    threads_measured = []

    def one_thread_peak(precision: str, **_) -> Peak:
        threads_measured.append(torch.get_num_threads())
        return Peak(1.0, "a figure for this test")

    monkeypatch.setattr(peaks, "measure_cpu_peak", one_thread_peak)
    config = two_rank_config("fsdp", max_steps=4)
    attrs: dict = {}
    outcome = execute_ranks(config, attrs, deadline_s=DEADLINE_S)
    assert str(outcome.verdict) == "ok"
    check_trial_attrs({**attrs, "verdict": str(outcome.verdict)})  # the verdict is written by the caller
    assert threads_measured == [1]  # each rank computes on one thread
    assert attrs["peak_tflops"] == 2.0
    assert attrs["peak_source"] == "2 ranks x (a figure for this test) at 1 thread each"
    achieved = attrs["model_flops_per_sample"] * attrs["steady_samples_per_s"] / 1e12
    assert attrs["achieved_tflops"] == pytest.approx(achieved)
    assert attrs["mfu"] == pytest.approx(achieved / 2.0)
    assert attrs["collective_share"] == max(attrs["parallel"]["collective_share_per_rank"])
    assert attrs["parallel_observed"]["reshard_after_forward"] == {"blocks": 2, "blocks_gathered_after_forward": 0}


@pytest.mark.parametrize(
    ("strategy", "knob", "requested", "why"),
    [
        (
            "ddp",
            "bucket_cap_mb",
            0.01,
            "systems.parallel.bucket_cap_mb 0.01 requested, but an all-reduce carried 0.05737 MB, above the cap plus "
            "the largest gradient (0.02563 MB)",
        ),
        (
            "ddp",
            "gradient_as_bucket_view",
            True,
            "systems.parallel.gradient_as_bucket_view True requested, but 0 of 29 gradients lived in the all-reduced "
            "buckets' storage",
        ),
        (
            "fsdp",
            "reshard_after_forward",
            False,
            "systems.parallel.reshard_after_forward False requested, but 0 of 2 blocks still held their gathered "
            "parameters after forward",
        ),
    ],
)
def test_a_knob_that_did_not_take_effect_ends_the_trial_mismatch(monkeypatch, strategy, knob, requested, why):
    dropping_in_ranks(monkeypatch, knob)
    monkeypatch.setattr(ranks, "run_ranks", functools.partial(run_ranks, after_step=drop_knob))
    attrs: dict = {}
    outcome = ranks.execute_ranks(two_rank_config(strategy, **{knob: requested}), attrs, deadline_s=DEADLINE_S)
    assert str(outcome.verdict) == f"mismatch: rank 0: {why}"
    assert attrs["parallel_observed"][knob] is not None  # the evidence is recorded with the verdict
    assert "verdict_implicates" not in attrs  # a value that did not take effect is not one to avoid
