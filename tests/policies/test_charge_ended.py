"""``UsageTracker.charge_ended``: runs that ended, charged at once as ``charge_interval`` at
each run's end would have charged them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.policies.fairshare import UsageTracker

H = 3600.0
ACCOUNT = ("o", "t", "q", "u")


Runs = list[tuple[float, list[tuple[float, float]]]]


def one_by_one(half_life: float, runs: Runs) -> UsageTracker:
    """The reference: each run charged at its end, in the order they ended."""
    tracker = UsageTracker(half_life)
    each = [(rate, start, end) for rate, spans in runs for start, end in spans]
    for rate, start, end in sorted(each, key=lambda r: r[2]):
        tracker.charge_interval(ACCOUNT, rate, start, end)
    return tracker


@pytest.mark.parametrize(
    ("half_life", "runs", "now"),
    [
        (H, [(2.0, [(0.0, H)])], H),  # ended now
        (H, [(2.0, [(0.0, H)])], 5 * H),  # ended four half-lives ago
        (H, [(10.5, [(0.0, H), (0.5 * H, 3 * H), (2 * H, 2.25 * H)])], 4 * H),  # overlapping
        (H, [(2.0, [(0.0, H)]), (21.0, [(0.5 * H, 2 * H)]), (0.5, [(3 * H, 3.5 * H)])], 4 * H),
        (7 * 86400.0, [(8.0, [(i * 600.0, i * 600.0 + 300.0) for i in range(200)])], 40 * H),
        (math.inf, [(3.0, [(0.0, H), (10 * H, 11 * H)]), (1.0, [(0.0, 1.0)])], 1e9),  # no decay
        (H, [(1.0, [(2 * H, 2 * H)])], 3 * H),  # a run of no length: nothing
        (H, [], 3 * H),  # no run: nothing
    ],
)
def test_as_if_each_run_had_been_charged_at_its_end(
    half_life: float, runs: Runs, now: float
) -> None:
    at_once = UsageTracker(half_life)
    at_once.charge_ended(ACCOUNT, runs, now)
    reference = one_by_one(half_life, runs)
    for depth in range(len(ACCOUNT) + 1):
        expected = reference.usage_at(ACCOUNT[:depth], now)
        assert at_once.usage_at(ACCOUNT[:depth], now) == pytest.approx(expected, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    st.floats(60.0, 1e6),
    st.floats(0.0, 100.0),
    st.lists(st.tuples(st.floats(0.0, 1e6), st.floats(0.0, 1e5)), min_size=1, max_size=20),
    st.floats(0.0, 1e6),
)
def test_any_runs_sum_as_one_by_one(
    half_life: float, rate: float, runs: list[tuple[float, float]], after: float
) -> None:
    spans = [(start, start + length) for start, length in runs]
    now = max(end for _, end in spans) + after
    at_once = UsageTracker(half_life)
    at_once.charge_ended(ACCOUNT, [(rate, spans)], now)
    expected = one_by_one(half_life, [(rate, spans)]).usage_at(ACCOUNT, now)
    assert at_once.usage_at(ACCOUNT, now) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_later_charges_go_on_from_it() -> None:
    """Booked at ``now``: the tracker's time is ``now``, later charges add to it."""
    tracker = UsageTracker(H)
    tracker.charge_ended(ACCOUNT, [(1.0, [(0.0, H)])], 2 * H)
    tracker.charge_interval(ACCOUNT, 1.0, 2 * H, 3 * H)
    reference = one_by_one(H, [(1.0, [(0.0, H), (2 * H, 3 * H)])])
    assert tracker.usage_at(ACCOUNT, 4 * H) == pytest.approx(reference.usage_at(ACCOUNT, 4 * H))
    with pytest.raises(ValueError, match="backwards"):
        tracker.charge_ended(ACCOUNT, [(1.0, [(0.0, H)])], H)


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([(0.0, 3 * H)], 2 * H),  # ends after now (a clock set back): up to now
        ([(H, 0.0), (H, H)], None),  # ends before it starts, or where: nothing, no account
        ([(H, 0.0), (0.0, H)], H),  # the other run counts
    ],
)
def test_runs_count_up_to_now_and_only_forwards(
    spans: list[tuple[float, float]], expected: float | None
) -> None:
    tracker = UsageTracker(math.inf)  # (no decay: what counts is plain)
    tracker.charge_ended(ACCOUNT, [(1.0, spans)], 2 * H)
    if expected is None:
        assert tracker.accounts() == []
    else:
        assert tracker.usage_at(ACCOUNT, 2 * H) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("half_life", "span"),
    [
        *((h, span) for h in (H, math.inf) for span in ((-math.inf, H), (math.nan, H))),
        *((h, span) for h in (H, math.inf) for span in ((0.0, math.inf), (0.0, math.nan))),
        (math.inf, (-1e308, 1e308)),  # finite, but its usage without decay is not
    ],
)
def test_a_run_of_no_finite_usage_counts_nothing(
    half_life: float, span: tuple[float, float]
) -> None:
    """A stored run that no clock could have made (an infinite start or end, a span too
    long to charge without decay) counts nothing, and does not stop the others being
    charged (a restarted controller charges them as it starts)."""
    tracker = UsageTracker(half_life)
    tracker.charge_ended(ACCOUNT, [(2.0, [span, (0.0, H)])], 2 * H)
    assert tracker.usage_at(ACCOUNT, 2 * H) == pytest.approx(
        one_by_one(half_life, [(2.0, [(0.0, H)])]).usage_at(ACCOUNT, 2 * H), rel=1e-12
    )
