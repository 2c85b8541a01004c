"""The probe on every rank and the knobs each rank was seen to run, agreed over the group: how the
gathered facts become one verdict naming the rank (made-up facts), and over real gloo on the CPU
what a trial of ranks records, and how a fault of rank 1 alone ends every rank before it trains on."""

from __future__ import annotations

import pytest
import torch
from parallel_rank_probe_faults import PROBE_ERROR, faulty_trial
from parallel_ranks import no_rank_left_behind, two_rank_config  # noqa: F401 (autouse)

from hpo.parallel import rank_probe
from hpo.parallel.agreement import AgreedVerdict
from hpo.parallel.faults import RankExits, classify, describe_error
from hpo.records import check_trial_attrs
from hpo.trial import _ranks as ranks
from hpo.verify.probing import _probe as probe_module
from hpo.workloads.catalog import create_workload

DEADLINE_S = 300
BF16_SEEN = {
    "precision": "bf16",
    "grad_scaler": False,
    "precisions": ["bf16"],
    "attention": "eager",
    "attention_dtype": "bf16",
    "attentions": ["eager"],
    "optimizer": "forloop",
    "grad_checkpointing": False,
    "compile": False,
    "compiled_graphs": 0,
    "cudnn_benchmark": None,
}
FP32_SEEN = {**BF16_SEEN, "precision": "fp32", "precisions": ["fp32"], "attention_dtype": "fp32"}


def gathering(monkeypatch, every: list) -> None:
    """The group's gather answers `every` (by rank), as all_gather_object would on each rank."""
    monkeypatch.setattr(rank_probe, "gathered", lambda own, world: every)


def test_a_rank_whose_knobs_ran_as_something_else_is_named_on_every_rank(monkeypatch):
    gathering(monkeypatch, [BF16_SEEN, FP32_SEEN])
    with pytest.raises(AgreedVerdict) as raised:
        rank_probe.agreed_observation(BF16_SEEN, two_rank_config(precision="bf16").knobs, world=2)
    assert str(raised.value.verdict).startswith("mismatch: rank 1: precision"), str(raised.value.verdict)
    assert raised.value.observed == BF16_SEEN  # rank 0's, recorded with the verdict


def test_a_rank_that_ran_other_than_rank_0_is_a_mismatch_even_when_both_agree_with_the_request(monkeypatch):
    other = {**BF16_SEEN, "compiled_graphs": 1}  # no knob's check reads it; rank 0 saw 0
    gathering(monkeypatch, [BF16_SEEN, other])
    with pytest.raises(AgreedVerdict) as raised:
        rank_probe.agreed_observation(BF16_SEEN, two_rank_config(precision="bf16").knobs, world=2)
    assert str(raised.value.verdict) == "mismatch: rank 1 observed compiled_graphs 1 against rank 0's 0"
    gathering(monkeypatch, [BF16_SEEN, dict(BF16_SEEN)])
    assert rank_probe.agreed_observation(BF16_SEEN, two_rank_config(precision="bf16").knobs, world=2) == BF16_SEEN


def test_a_failed_probe_on_one_rank_ends_every_rank_naming_it_with_its_traceback(monkeypatch):
    passed = {"kind": "ok", "detail": "", "implicates": [], "traceback": None, "probe_s": 1.0}
    failed = {
        "kind": "incompatible",
        "detail": "attention=sdpa: refused",
        "implicates": [["attention", "sdpa"]],
        "traceback": "Traceback ...",
        "probe_s": 2.0,
    }
    monkeypatch.setattr(rank_probe, "_own_probe", lambda *args: passed)
    gathering(monkeypatch, [passed, failed])
    with pytest.raises(AgreedVerdict) as raised:
        rank_probe.probe_on_rank(None, two_rank_config(), rank=0, world=2, device=None)
    assert str(raised.value.verdict) == "incompatible: rank 1's probe: attention=sdpa: refused"
    assert raised.value.verdict.implicates == (("attention", "sdpa"),)
    assert raised.value.kept == {"traceback": "Traceback ...", "probe_s": 2.0}
    gathering(monkeypatch, [passed, dict(passed)])
    assert rank_probe.probe_on_rank(None, two_rank_config(), rank=1, world=2, device=None)["probe_s_per_rank"] == [1.0, 1.0]


def test_an_agreed_verdict_is_the_trial_s_whatever_else_the_ranks_recorded():
    agreed = describe_error(
        AgreedVerdict(ranks.Verdict.make(ranks.Kind.INCOMPATIBLE, "rank 1's probe: x", [("precision", "bf16")]))
    )
    seen = RankExits(world=2, collective_timeout_s=5, exits={0: 1, 1: 1}, errors={0: agreed, 1: agreed})
    verdict = classify(seen)
    assert str(verdict) == "incompatible: rank 1's probe: x"  # not "rank 0 before its first step: ..."
    assert verdict.implicates == (("precision", "bf16"),)


def test_a_rank_s_probe_times_no_step_not_even_the_reference_s(monkeypatch):
    timed = []
    real = probe_module.timed_reference
    monkeypatch.setattr(probe_module, "timed_reference", lambda *args: timed.append(args[-2].training.batch_size) or real(*args))
    config = two_rank_config()
    workload = create_workload(config.workload, config.workload_options)
    workload.bind_training(config.training.params())
    record = rank_probe.probe_on_rank(workload, config, rank=0, world=1, device=torch.device("cpu"))
    assert record["kind"] == "ok" and record["loss_rel_err"] is not None  # the compared steps ran
    assert timed == []  # no step's speed is judged under ranks: nothing to time the reference for
    probe_module.run_probe(workload, config, torch.device("cpu"), timed=False)  # a one-process trial's probe
    assert timed == [8]
    with pytest.raises(ValueError, match="timed needs time_reference"):
        probe_module.run_probe(workload, config, torch.device("cpu"), time_reference=False)


@pytest.mark.slow
def test_a_trial_of_ranks_records_the_knobs_it_ran_and_its_probe():
    attrs: dict = {}
    outcome = ranks.execute_ranks(two_rank_config("fsdp", "bf16"), attrs, deadline_s=DEADLINE_S)
    assert str(outcome.verdict) == "ok"
    check_trial_attrs({**attrs, "verdict": str(outcome.verdict)})
    # FSDP2 casts by its policy, no autocast: the bf16 seen is what reached the matmuls.
    assert attrs["knobs_observed"] == BF16_SEEN
    probe_s = attrs["parallel"]["probe_s_per_rank"]
    assert len(probe_s) == 2 and attrs["probe_s"] == max(probe_s) > 0
    assert attrs["probe_loss_rel_err"] is not None and attrs["probe_loss_rel_err"] <= attrs["probe_loss_bound"]
    assert attrs["parallel"]["probe"] == rank_probe.PROBE_UNDER_RANKS


@pytest.mark.slow
def test_precision_dropped_on_rank_1_alone_ends_the_trial_mismatch_naming_rank_1(monkeypatch):
    outcome, attrs = faulty_trial(monkeypatch, "precision_dropped", two_rank_config("ddp", "bf16"), DEADLINE_S)
    assert str(outcome.verdict).startswith("mismatch: rank 1: precision: asked bf16, ran fp32"), str(outcome.verdict)
    assert attrs["knobs_observed"] == BF16_SEEN  # rank 0's evidence, recorded with the verdict
    assert attrs["parallel"]["last_steps"] == {}  # agreed after the evidence step, before either rank reported it


@pytest.mark.slow
def test_a_probe_step_that_raises_on_rank_1_ends_the_trial_before_any_rank_trains(monkeypatch):
    outcome, attrs = faulty_trial(monkeypatch, "probe_raises", two_rank_config("ddp", "fp32"), DEADLINE_S)
    assert str(outcome.verdict) == f"error: rank 1's probe: RuntimeError: {PROBE_ERROR}"
    assert PROBE_ERROR in attrs["error_traceback"] and "loss_and_grads" in attrs["error_traceback"]
    assert attrs["parallel"]["last_steps"] == {}
    assert attrs["probe_s"] > 0


@pytest.mark.slow
def test_a_probe_step_that_fails_on_rank_1_under_bf16_only_is_incompatible_naming_rank_1(monkeypatch):
    outcome, attrs = faulty_trial(monkeypatch, "probe_raises_under_bf16", two_rank_config("ddp", "bf16"), DEADLINE_S)
    verdict = str(outcome.verdict)
    assert verdict.startswith(f"incompatible: rank 1's probe: RuntimeError: {PROBE_ERROR}"), verdict
    assert outcome.verdict.implicates == (("precision", "bf16"),)  # the differential run proved it
    assert attrs["parallel"]["last_steps"] == {}
