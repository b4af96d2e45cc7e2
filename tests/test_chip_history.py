"""The window figures a chip's history keeps as it grows (ledger/chip_history.py) equal the walk
they replace: the walk here is the findings' definition written out over the samples (newest
first, passing samples after "now", stopping at the first older than the window), with the
mean taken exactly (Fraction) and the median by `statistics.median`."""

from fractions import Fraction
from itertools import pairwise
from statistics import median

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnwatch.ledger.chip_history import (
    HBM_TREND_MIN_SAMPLES,
    HBM_TREND_WINDOW_S,
    UTIL_WINDOW_S,
    ChipHistory,
    HbmSteps,
)
from tests.tui_fleet import SCENARIO_TICKS, now_at, scenario_ledger


def walked(history: ChipHistory, at_s: float, window_s: float) -> list:
    out = []
    for sample in reversed(history):
        if at_s - sample.t_s > window_s:
            break
        if sample.t_s <= at_s:
            out.append(sample)
    return out[::-1]


def walked_util_mean(history: ChipHistory, at_s: float) -> float | None:
    utils = [s.util_pct for s in walked(history, at_s, UTIL_WINDOW_S) if s.util_pct is not None]
    return float(sum(map(Fraction, utils)) / len(utils)) if utils else None


def walked_hbm_steps(history: ChipHistory, at_s: float) -> HbmSteps | None:
    points = [(s.t_s, s.hbm_bytes) for s in walked(history, at_s, HBM_TREND_WINDOW_S) if s.hbm_bytes is not None]
    if len(points) < HBM_TREND_MIN_SAMPLES:
        return None
    steps = [((b - a) / (u - t), b > a) for (t, a), (u, b) in pairwise(points) if u > t]
    if not steps:
        return None
    rising = sum(up for _, up in steps) / len(steps)
    return HbmSteps(median(r for r, _ in steps), points[-1][0] - points[0][0], len(points), rising, points[-1][1])


def walked_growth_per_s(history: ChipHistory, count: int, at_s: float) -> float | None:
    points = [(s.t_s, s.hbm_bytes) for s in reversed(history) if s.t_s <= at_s and s.hbm_bytes is not None]
    if len(points) < count:
        return None
    (newest_s, newest_bytes), (oldest_s, oldest_bytes) = points[0], points[count - 1]
    return (newest_bytes - oldest_bytes) / (newest_s - oldest_s) if newest_s > oldest_s else None


def assert_as_walked(history: ChipHistory, at_s: float) -> None:
    assert history.util_mean_pct(at_s) == walked_util_mean(history, at_s)
    assert history.hbm_steps(at_s) == walked_hbm_steps(history, at_s)
    for count in (2, HBM_TREND_MIN_SAMPLES):
        assert history.hbm_growth_per_s(count, at_s) == walked_growth_per_s(history, count, at_s)


# A sample: seconds since the previous one (0: the same time; negative: the clock stepped back;
# past a window: a gap, as a lost host that came back), utilisation, HBM (a drop to a small
# figure: a runtime restarted, its memory freed).
samples = st.lists(
    st.tuples(
        st.one_of(
            st.sampled_from([1.0, 1.0, 1.0, 0.5, 0.0, 2.5, UTIL_WINDOW_S, HBM_TREND_WINDOW_S + 1.0, -3.0]),
            st.floats(0.01, 40.0),
        ),
        st.one_of(st.none(), st.floats(0.0, 100.0), st.sampled_from([0.0, 100.0, 33.3])),
        st.one_of(st.none(), st.integers(0, 144 << 30), st.integers(0, (1 << 63) + 5)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(samples, st.integers(4, 40))
def test_running_window_figures_equal_the_walk_at_every_report(history_samples, size):
    history = ChipHistory(size)
    t_s = 1000.0
    for dt, util, hbm in history_samples:
        t_s += dt
        history.append(t_s, util, hbm)
        assert_as_walked(history, t_s)  # judged at the newest sample: the running values
        assert_as_walked(history, t_s + 4.0)  # the host's latest report gave this chip no sample
        assert_as_walked(history, t_s - 0.5)  # judged at a "now" before the newest sample


def test_eviction_at_the_window_edge_keeps_a_sample_exactly_a_window_old():
    history = ChipHistory()
    for t in range(12):
        history.append(float(t), float(t), 1 << 30)
    # at 11 s the window reaches back to 1 s: a sample exactly UTIL_WINDOW_S old is in it
    assert history.util_mean_pct(11.0) == walked_util_mean(history, 11.0) == sum(range(1, 12)) / 11
    history.append(11.5, 50.0, None)
    assert history.util_mean_pct(11.5) == walked_util_mean(history, 11.5) == (sum(range(2, 12)) + 50.0) / 11


def test_a_window_over_the_whole_ring_loses_the_overwritten_samples():
    history = ChipHistory(size=HBM_TREND_MIN_SAMPLES + 2)  # 10 samples at 10 Hz: 1 s of a 30 s window
    for k in range(25):
        history.append(k / 10, 10.0 * (k % 3), (1 << 30) + (k << 20))
        assert_as_walked(history, k / 10)
    steps = history.hbm_steps(2.4)
    assert steps is not None and steps.samples == 10 and steps.rate_bytes_per_s == pytest.approx(10 << 20)


def test_a_gap_longer_than_the_window_empties_it():
    history = ChipHistory()
    for t in range(20):
        history.append(float(t), 90.0, (1 << 30) + (t << 21))
    assert history.hbm_steps(19.0) is not None
    history.append(19.0 + HBM_TREND_WINDOW_S + 5, 10.0, 1 << 30)  # the host was lost, and came back
    assert history.util_mean_pct(54.0) == 10.0 and history.hbm_steps(54.0) is None
    assert_as_walked(history, 54.0)


def test_judging_at_the_newest_sample_walks_no_sample(monkeypatch):
    history = ChipHistory()
    for t in range(60):
        history.append(float(t), float(t % 7), (1 << 30) + (t << 20) * (t % 2))
    expected = (walked_util_mean(history, 59.0), walked_hbm_steps(history, 59.0), walked_growth_per_s(history, 8, 59.0))

    def no_walk(*args):
        raise AssertionError("walked the samples")

    monkeypatch.setattr(ChipHistory, "_window", no_walk)
    monkeypatch.setattr(ChipHistory, "__reversed__", no_walk)
    assert (history.util_mean_pct(59.0), history.hbm_steps(59.0), history.hbm_growth_per_s(8, 59.0)) == expected


@pytest.mark.parametrize("scenario", ["hbm-leak", "straggler", "healthy"])
def test_every_chip_of_a_simulated_ultraserver_reads_its_window_as_walked(scenario):
    ledger = scenario_ledger(scenario)
    now_s = now_at(SCENARIO_TICKS[scenario])
    for host in ledger.hosts.values():
        at_s = min(now_s, host.last_s)
        for chip in host.chips:
            assert_as_walked(chip.history, at_s)
