"""The rank test behind a `slow` verdict (`hpo.verify.timing._pair_rank_test`): exact chances, and when a proof is
decided, still open, or can no longer succeed."""

from __future__ import annotations

import itertools
import math

import pytest

from hpo.verify.timing._pair_rank_test import Outlook, _orderings, chance_of_losing, outlook, pairs_lost


def test_the_chance_is_the_share_of_orderings_counted_by_brute_force():
    """Every ordering of 3 knobs steps and 4 reference steps, counted by hand."""
    counts = [0] * 13
    for knobs_places in itertools.combinations(range(7), 3):
        counts[sum(1 for k in knobs_places for r in set(range(7)) - set(knobs_places) if k > r)] += 1
    assert [_orderings(3, 4, lost) for lost in range(13)] == counts
    assert chance_of_losing(10, 3, 4) == pytest.approx(sum(counts[10:]) / math.comb(7, 3))
    assert chance_of_losing(0, 3, 4) == 1.0


def test_every_pair_lost_in_six_rounds_is_a_verdict_and_in_five_is_not_yet():
    assert chance_of_losing(36, 6, 6) == pytest.approx(1 / 924)
    assert outlook([20.0] * 6, [10.0] * 6, 1.5, 10) is Outlook.SLOW
    assert outlook([20.0] * 5, [10.0] * 5, 1.5, 10) is Outlook.OPEN


def test_a_stopped_step_counts_only_against_reference_steps_it_is_already_over():
    # 31 ms (stopped) is over 1.5 x 20 but not over 1.5 x 30.
    assert pairs_lost([31.0], [10.0, 20.0, 30.0], 1.5) == 2


def test_a_proof_that_can_no_longer_reach_the_chance_is_unprovable_before_the_cap():
    """Half the pairs lost in 8 rounds: even losing every pair of the 2 rounds left is not enough."""
    reference = [10.0, 30.0] * 4  # the knobs at 20 ms lose only to the 10 ms steps
    assert outlook([20.0] * 8, reference, 1.5, 10) is Outlook.UNPROVABLE
    assert outlook([20.0] * 3, reference[:3], 1.5, 10) is Outlook.OPEN
