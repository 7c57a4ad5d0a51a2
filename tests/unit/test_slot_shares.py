"""Who gives up task slots to whom, and which of its attempts."""

from __future__ import annotations

from collections import Counter

from cu_service.slot_shares import Attempt, Holding, preemptions, victims


def test_a_waiting_submitter_takes_half_of_two_slots_back() -> None:
    holdings = [Holding("guest", running=2, waiting=2), Holding("owner", running=0, waiting=1)]
    assert preemptions(holdings, free_slots=0) == Counter({"guest": 1})


def test_nothing_is_killed_for_a_submitter_that_waits_for_nothing() -> None:
    holdings = [Holding("guest", running=2, waiting=5), Holding("owner", running=0, waiting=0)]
    assert preemptions(holdings, free_slots=0) == Counter()


def test_a_free_slot_is_used_before_anything_is_killed() -> None:
    holdings = [Holding("guest", running=3, waiting=5), Holding("owner", running=0, waiting=1)]
    assert preemptions(holdings, free_slots=1) == Counter()


def test_one_slot_apart_is_fair_enough() -> None:
    # Three slots between two: two and one is as fair as it gets; taking one would swap them.
    holdings = [Holding("guest", running=2, waiting=9), Holding("owner", running=1, waiting=9)]
    assert preemptions(holdings, free_slots=0) == Counter()


def test_a_submitter_wanting_less_than_its_share_leaves_the_rest() -> None:
    holdings = [Holding("guest", running=8, waiting=9), Holding("owner", running=0, waiting=1)]
    assert preemptions(holdings, free_slots=0) == Counter({"guest": 1})


def test_shares_are_even_among_three() -> None:
    holdings = [
        Holding("a", running=9, waiting=9),
        Holding("b", running=0, waiting=9),
        Holding("c", running=0, waiting=9),
    ]
    assert preemptions(holdings, free_slots=0) == Counter({"a": 6})


def test_the_one_holding_most_gives_first() -> None:
    holdings = [
        Holding("a", running=5, waiting=1),
        Holding("b", running=3, waiting=1),
        Holding("c", running=0, waiting=4),
    ]
    # 5, 3, 0 becomes 3, 3, 2: only a is over.
    assert preemptions(holdings, free_slots=0) == Counter({"a": 2})


def test_the_latest_launched_attempts_are_killed() -> None:
    attempts = [Attempt(1, 100), Attempt(2, 300), Attempt(3, 200)]
    assert victims(attempts, 2) == [Attempt(2, 300), Attempt(3, 200)]
    assert victims(attempts, 0) == []
