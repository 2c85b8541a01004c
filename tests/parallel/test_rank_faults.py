"""Faults injected once each into a 2-rank trial over real gloo: each ends the trial in the state
that names the rank, within the group's collective timeout, and leaves no process or port behind
(the autouse check in conftest.py)."""

from __future__ import annotations

import socket

import pytest
from parallel_ranks import hang_rank, kill_rank_mid_run, no_rank_left_behind, two_rank_config  # noqa: F401 (autouse)

from hpo.parallel import run_ranks

# Far above any step of this model; the faults must end the trial through their own path first.
DEADLINE_S = 300


@pytest.mark.slow
def test_a_rank_killed_mid_run_ends_the_trial_crashed_naming_it():
    outcome = run_ranks(two_rank_config(max_steps=6), after_step=kill_rank_mid_run, deadline_s=DEADLINE_S)
    assert str(outcome.verdict) == "crashed: rank 1 died (signal SIGKILL) after step 1"


@pytest.mark.slow
def test_a_rank_that_hangs_ends_the_trial_by_the_collective_timeout():
    config = two_rank_config(max_steps=6, collective_timeout_s=5)
    outcome = run_ranks(config, after_step=hang_rank, deadline_s=DEADLINE_S)
    verdict = str(outcome.verdict)
    assert verdict.startswith(
        "timeout: rank 0 waited past the 5 s collective timeout after step 1; rank 1 (after step 1) never answered: "
    ), verdict
    assert "Timed out" in verdict


@pytest.mark.slow
def test_a_rank_handed_another_learning_rate_ends_the_trial_before_any_step():
    config = two_rank_config()
    own = [config.to_dict(), config.to_dict()]
    own[1]["params"]["lr"] = 2e-3
    outcome = run_ranks(config, own_configs=own, deadline_s=DEADLINE_S)
    assert outcome.verdict.kind.value == "mismatch"
    assert str(outcome.verdict).startswith("mismatch: rank 1 would run config "), str(outcome.verdict)
    assert "params.lr 0.002 against rank 0's 0.001" in str(outcome.verdict)
    assert outcome.last_steps == {}  # no rank trained a step


def test_a_port_already_in_use_is_refused_at_once_naming_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        outcome = run_ranks(two_rank_config(port=port), deadline_s=DEADLINE_S)
    assert str(outcome.verdict) == (
        f"error: systems.parallel.port: cannot listen on 127.0.0.1:{port} (address already in use); "
        "free it, or leave port unset so the OS picks a free one"
    )
