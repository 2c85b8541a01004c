"""A Lightning workload's trial as 2 ranks over real gloo on the CPU: Lightning's own Trainer under
its DDPStrategy on the ranks hpo's launcher started (never processes Lightning starts itself), with
the knobs mapped as in a one-process Lightning trial, after the probe on every rank (a fault of
rank 1's probe alone ends every rank before any trains); `fsdp` refused when the file is read."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from parallel_rank_probe_faults import PROBE_ERROR, faulty_trial
from parallel_ranks import kill_rank_mid_run, no_rank_left_behind, two_rank_config  # noqa: F401 (autouse)

from hpo.config.space import parse_space
from hpo.errors import UserInputError
from hpo.parallel import run_ranks
from hpo.trial import execute
from hpo.trial._lightning_loop import train_lightning
from hpo.trial._lightning_rank_train import PROBE_UNDER_LIGHTNING_RANKS, train_lightning_on_rank
from hpo.trial._lightning_ranks import RankRows
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import create_workload

TOY = {"name": "toy_lightning:ToyLightning", "d_model": 16, "n_heads": 2, "seq_len": 8, "n_blocks": 1}
# The ranks reduce the gradients in another order than one process sums them: fp32 rounding only
# (measured after 4 AdamW steps of the toy: the validation loss the same to 1e-7, relative).
PARITY_RTOL = 1e-5


def _one_process_metrics(config) -> dict:
    """The same trial through Lightning's Trainer in one process, at the same global batch."""
    alone = dataclasses.replace(config, parallel=None)
    workload = create_workload(alone.workload, alone.workload_options)
    workload.bind_training(dataclasses.asdict(alone.training))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread, as a rank runs
    try:
        torch.manual_seed(alone.seed)
        return train_lightning(workload, alone, torch.device("cpu")).metrics
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_a_lightning_trial_runs_lightnings_ddp_strategy_on_two_ranks_and_records_what_ran():
    config = two_rank_config("ddp", workload=TOY, bucket_cap_mb=25)
    outcome = execute(config, MemoryVerdicts())
    assert str(outcome.verdict) == "ok", str(outcome.verdict)
    attrs, record = outcome.attrs, outcome.attrs["parallel"]
    assert attrs["trainer"] == "lightning" and attrs["lightning_precision"] == "32-true"
    # The Trainer itself saw a DDP strategy over 2 ranks and wrapped the module in torch's DDP.
    assert record["lightning"] == {
        "strategy": "DDPStrategy",
        "world_size": 2,
        "global_rank": 0,
        "precision": "32-true",
        "model_wrapped_as": "DistributedDataParallel",
    }
    assert (record["global_batch"], record["batch_per_rank"], record["batch_per_rank_seen"]) == (8, 4, 4)
    assert record["last_steps"] == {0: 3, 1: 3}
    # Every gradient in one fp32 all-reduce of the recorded step: DDP ran, not Lightning alone.
    assert record["wire"]["all_reduce"]["calls"] == 1 and record["reduce_dtypes_seen"] == ["float32"]
    assert attrs["knobs_observed"]["optimizer"] == "forloop"
    # Every rank probed its half of the batch before the Trainer started; rank 0's compared step is recorded.
    probe_s = record["probe_s_per_rank"]
    assert len(probe_s) == 2 and attrs["probe_s"] == max(probe_s) > 0 and attrs["probe_cached"] is False
    assert attrs["probe_loss_rel_err"] is not None and attrs["probe_loss_rel_err"] <= attrs["probe_loss_bound"]
    assert record["probe"] == PROBE_UNDER_LIGHTNING_RANKS
    # Each rank trained its half of each global batch: the validation loss one process reaches.
    assert attrs["metrics"]["val_loss"] == pytest.approx(_one_process_metrics(config)["val_loss"], rel=PARITY_RTOL)


@pytest.mark.slow
def test_bf16_and_the_bucket_cap_are_what_the_lightning_ranks_ran():
    cap_mb = 0.002  # the toy's 6.5 KB of gradients no longer fit one bucket
    outcome = execute(two_rank_config("ddp", precision="bf16", workload=TOY, bucket_cap_mb=cap_mb), MemoryVerdicts())
    assert str(outcome.verdict) == "ok", str(outcome.verdict)
    attrs = outcome.attrs
    assert attrs["parallel"]["lightning"]["precision"] == "bf16-mixed" == attrs["lightning_precision"]
    assert attrs["knobs_observed"]["precision"] == "bf16"  # the dtype the step's kernels ran in
    buckets = attrs["parallel_observed"]["bucket_cap_mb"]
    assert buckets["all_reduce_calls"] == attrs["parallel"]["wire"]["all_reduce"]["calls"] > 1
    assert buckets["largest_all_reduce_mb"] <= cap_mb + buckets["largest_gradient_mb"]


@pytest.mark.slow
def test_a_probe_step_that_raises_on_lightning_rank_1_ends_the_trial_before_any_rank_trains(monkeypatch):
    outcome, attrs = faulty_trial(monkeypatch, "probe_raises", two_rank_config("ddp", workload=TOY))
    assert str(outcome.verdict) == f"error: rank 1's probe: RuntimeError: {PROBE_ERROR}"
    assert PROBE_ERROR in attrs["error_traceback"] and "loss_and_grads" in attrs["error_traceback"]
    assert attrs["parallel"]["last_steps"] == {} and "metrics" not in attrs  # no rank's Trainer stepped
    assert attrs["probe_s"] > 0 and attrs["parallel"]["probe"] == PROBE_UNDER_LIGHTNING_RANKS


@pytest.mark.slow
def test_precision_dropped_in_lightning_rank_1s_probe_is_incompatible_naming_rank_1(monkeypatch):
    outcome, attrs = faulty_trial(monkeypatch, "probe_precision_dropped", two_rank_config("ddp", "bf16", workload=TOY))
    verdict = str(outcome.verdict)
    assert verdict.startswith("incompatible: rank 1's probe: ran other than asked: precision: asked bf16, ran fp32"), verdict
    assert outcome.verdict.implicates == (("precision", "bf16"),)  # the probe's evidence proved it
    assert attrs["parallel"]["last_steps"] == {} and "metrics" not in attrs


@pytest.mark.slow
def test_a_lightning_rank_killed_mid_run_ends_the_trial_crashed_naming_it():
    config = two_rank_config("ddp", workload=TOY)
    outcome = run_ranks(config, after_step=kill_rank_mid_run, deadline_s=300, train=train_lightning_on_rank)
    assert str(outcome.verdict) == "crashed: rank 1 died (signal SIGKILL) after step 1"
    assert outcome.ranks == []  # no_rank_left_behind: rank 0 was stopped and joined, no port left bound


def _lightning_space(strategy) -> dict:
    return {
        "workload": {**TOY, "max_steps": 2},
        "params": {"batch_size": 8},
        "systems": {"device": "cpu", "parallel": {"processes": 2, "strategy": strategy}},
    }


@pytest.mark.parametrize("workload", ["causal_lm_lightning", "toy_lightning:ToyLightning"])
def test_fsdp_for_a_lightning_workload_is_refused_when_the_file_is_read(workload):
    raw = _lightning_space(["ddp", "fsdp"])
    raw["workload"] = {"name": workload, "max_steps": 2}
    with pytest.raises(UserInputError) as caught:
        parse_space(raw, "space.yaml")
    assert str(caught.value).startswith(
        "space.yaml: systems.parallel.strategy: 'fsdp' is FSDP2 (fully_shard), which Lightning's Trainer does not apply"
    )
    assert f"use strategy ddp for workload {workload!r}" in str(caught.value)
    assert parse_space(_lightning_space("ddp"), "space.yaml").parallel["strategy"] == ["ddp"]


def test_each_rank_keeps_its_own_rows_of_the_global_batch_and_refuses_a_short_one():
    rows = torch.arange(8)
    loader = [(rows, rows * 10), {"x": rows}, (rows[:6], rows[:6])]
    sliced = iter(RankRows(loader, rank=1, world=2, global_batch=8))
    first, second = next(sliced), next(sliced)
    assert isinstance(first, tuple) and first[0].tolist() == [4, 5, 6, 7] and first[1].tolist() == [40, 50, 60, 70]
    assert second["x"].tolist() == [4, 5, 6, 7]
    with pytest.raises(
        ValueError, match="whole global batches of params.batch_size 8 rows, got one of 6; build it with drop_last=True"
    ):
        next(sliced)
