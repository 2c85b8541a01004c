"""`study.memory_limit_gb` holds on every rank of a trial of ranks, as in a one-process trial: a
rank that outgrows it ends the trial `oom` naming that rank (never the kernel's OOM killer, never
trained on past the limit), and the verdict implicates the knobs at that batch."""

from __future__ import annotations

import dataclasses

import pytest
from parallel_ranks import hog_memory_on_rank, no_rank_left_behind, two_rank_config  # noqa: F401 (autouse)

from hpo.parallel import RanksOutcome, run_ranks
from hpo.parallel.faults import RankExits, classify, describe_error
from hpo.trial import _ranks
from hpo.verdicts import Kind, Verdict

LIMIT_GB = 1.5  # a rank of the quickstart model holds well under it (torch and the model: about 0.5 GB)
DEADLINE_S = 300


@pytest.mark.slow
def test_a_rank_over_the_memory_limit_ends_the_trial_oom_naming_it():
    config = dataclasses.replace(two_rank_config(max_steps=5), memory_limit_gb=LIMIT_GB)
    outcome = run_ranks(config, after_step=hog_memory_on_rank, deadline_s=DEADLINE_S)
    verdict = str(outcome.verdict)
    assert outcome.verdict.kind is Kind.OOM and verdict.startswith("oom: rank 1 after step 1: "), verdict


@pytest.mark.slow
def test_ranks_under_the_memory_limit_train_and_each_rank_s_peak_is_under_it():
    config = dataclasses.replace(two_rank_config(max_steps=3), memory_limit_gb=LIMIT_GB)
    outcome = run_ranks(config, deadline_s=DEADLINE_S)
    assert outcome.verdict.ok, str(outcome.verdict)
    peaks = outcome.record()["peak_memory_mb_per_rank"]
    assert len(peaks) == 2 and all(0 < peak < LIMIT_GB * 1024 for peak in peaks), peaks


def test_an_allocation_the_cap_refuses_is_recorded_as_out_of_memory():
    refused = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 3221225472 bytes"
    )
    assert describe_error(refused)["kind"] == Kind.OOM.value
    assert describe_error(MemoryError("resident set 1.62 GB > memory_limit_gb 1.50 (hpo's CPU meter)"))["kind"] == Kind.OOM.value


def test_the_failing_rank_s_own_verdict_wins_over_its_peers_echo_whatever_their_rank():
    seen = RankExits(2, 60.0, exits={1: 1}, progress={0: 2, 1: 1})
    seen.errors = {
        0: describe_error(RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer")),
        1: describe_error(MemoryError("resident set 1.62 GB > memory_limit_gb 1.50 (hpo's CPU meter)")),
    }
    assert str(classify(seen)) == "oom: rank 1 after step 1: resident set 1.62 GB > memory_limit_gb 1.50 (hpo's CPU meter)"


def test_a_trial_of_ranks_out_of_memory_implicates_its_knobs_at_its_batch(monkeypatch):
    config = two_rank_config()
    rank_oom = Verdict.make(Kind.OOM, "rank 1 after step 1: resident set 1.62 GB > memory_limit_gb 1.50")
    monkeypatch.setattr(_ranks, "run_ranks", lambda config, **_: RanksOutcome(rank_oom))
    outcome = _ranks.execute_ranks(config, {})
    assert outcome.verdict.kind is Kind.OOM and outcome.verdict.detail == rank_oom.detail
    assert dict(outcome.verdict.implicates)["batch_size"] == 8 and dict(outcome.verdict.implicates)["precision"] == "fp32"
