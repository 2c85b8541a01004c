"""How the launcher's view of the ranks becomes one verdict that names the rank."""

from __future__ import annotations

import signal

from hpo.parallel.agreement import ConfigMismatch
from hpo.parallel.faults import RankExits, classify, describe_error, disagreement


def seen(**kwargs) -> RankExits:
    return RankExits(world=2, collective_timeout_s=5, **kwargs)


def test_a_rank_killed_by_a_signal_is_blamed_not_its_peer_that_lost_the_connection():
    verdict = classify(
        seen(
            exits={0: 1, 1: -signal.SIGKILL},
            errors={0: describe_error(RuntimeError("Connection closed by peer"))},
            progress={0: 2, 1: 1},
        )
    )
    assert str(verdict) == "crashed: rank 1 died (signal SIGKILL) after step 1"


def test_a_mismatch_wins_over_everything_else():
    mismatch = describe_error(ConfigMismatch("rank 1 would run config a, rank 0 runs b: params.lr"))
    verdict = classify(seen(exits={0: 1, 1: -signal.SIGTERM}, errors={1: mismatch}))
    assert str(verdict) == "mismatch: rank 1 would run config a, rank 0 runs b: params.lr"


def test_a_collective_timeout_names_the_rank_that_never_answered():
    error = describe_error(RuntimeError("[gloo/unbound_buffer.cc:78] Timed out waiting 5000ms for recv"))
    verdict = classify(seen(exits={0: 1}, errors={0: error}, progress={0: 3, 1: 2}, stopped=[1]))
    assert str(verdict) == (
        "timeout: rank 0 waited past the 5 s collective timeout after step 3; rank 1 (after step 2) never answered: "
        "Timed out waiting 5000ms for recv"
    )


def test_a_rank_that_exits_without_a_word_is_crashed():
    assert str(classify(seen(exits={1: 3}))) == "crashed: rank 1 exited with code 3 before its first step"


def test_the_trial_deadline_is_a_timeout_with_each_rank_s_progress():
    verdict = classify(seen(deadline_s=30, progress={0: 4, 1: 4}, stopped=[0, 1]))
    assert str(verdict) == "timeout: the ranks ran past 30 s (rank 0 after step 4, rank 1 after step 4)"


def test_another_error_of_a_rank_is_recorded_with_its_type():
    verdict = classify(seen(exits={0: 1}, errors={0: describe_error(ValueError("bad shape"))}, progress={0: 0}))
    assert str(verdict) == "error: rank 0 after step 0: ValueError: bad shape"


AGREED_RESULT = {
    "param_dtypes_seen": ["bfloat16"],
    "reduce_dtypes_seen": ["float32"],
    "batch_per_rank_seen": 4,
    "compiled": {"graphs": 3, "train_graphs": 3, "checkpoint_regions": 0},
}


def test_ranks_that_saw_different_dtypes_on_the_wire_end_mismatch_naming_the_rank():
    assert disagreement([AGREED_RESULT, dict(AGREED_RESULT)]) is None
    verdict = disagreement([AGREED_RESULT, {**AGREED_RESULT, "reduce_dtypes_seen": ["bfloat16"]}])
    assert str(verdict) == "mismatch: rank 1 saw reduce_dtypes_seen ['bfloat16'], rank 0 saw ['float32']"


def test_ranks_that_compiled_different_graphs_end_mismatch_naming_the_rank():
    fewer = {**AGREED_RESULT, "compiled": {"graphs": 1, "train_graphs": 1, "checkpoint_regions": 0}}
    verdict = disagreement([AGREED_RESULT, fewer])
    assert str(verdict).startswith("mismatch: rank 1 saw compiled {'graphs': 1, 'train_graphs': 1")
