"""A chip's bounded history, and the window figures the findings judge, kept as it grows.

The findings (ledger/findings.py) judge every chip once a second: its mean utilisation over
UTIL_WINDOW_S (the outlier rule) and its HBM trend over HBM_TREND_WINDOW_S (the leak rule), both
up to its host's latest report. At 1,152 hosts that is every chip every second, so walking each
chip's window then cost 77 ms a judgement on the event loop. Here each figure's inputs are folded
as a sample arrives and leave as it falls out of its window (or out of the ring), so reading one
is a few operations a chip:

- utilisation: the exact sum (a whole number of 2**-k, k the finest any figure in it needs) and
  count of the known figures in the window, so the mean is the exact mean rounded once, the same
  however the window moved and however long the session ran (no drift of a running float sum);
- HBM: the window's samples with a figure (points), their report-to-report rates in sorted order
  (the median is the trend's rate), how many of those grew, and the newest HBM_TREND_MIN_SAMPLES
  points (the leak rule's "still rising").

The running values are the window up to the newest sample. A figure read at another end (a host
report that gave this chip no sample, a "now" before the newest sample) or across a clock stepped
back (times that decreased somewhere in the window) is read by walking the arrays instead, with the
same arithmetic: the walk is the definition, the running values a faster way to the same numbers
(tests/test_chip_history.py holds them equal).
"""

import math
from array import array
from bisect import bisect_left, insort
from itertools import pairwise
from statistics import median
from typing import NamedTuple

# Five minutes of 1 Hz samples per chip: enough for sparklines and trend, bounded for a day-long run.
HISTORY_SAMPLES = 300
# The windows the findings judge (ledger/findings.py says what each rule does with them).
UTIL_WINDOW_S = 10.0
HBM_TREND_WINDOW_S = 30.0
HBM_TREND_MIN_SAMPLES = 8
# A sum of bounded byte counts over a chip's cores can pass what int64 holds; history is for
# sparklines and trends, so it stores at most this (the chip's own figures keep the exact sum).
MAX_HISTORY_BYTES = (1 << 63) - 1


def _exact(value: float) -> tuple[int, int]:
    """`value` as `(m, k)`: exactly m * 2**-k (every finite double is one; k is at most 1074)."""
    numerator, denominator = value.as_integer_ratio()
    return numerator, denominator.bit_length() - 1


def exact_mean(total: int, bits: int, count: int) -> float:
    """The mean of `count` values whose sum is exactly `total` * 2**-`bits`, rounded once (int / int
    is correctly rounded)."""
    return total / (count << bits)


class ChipSample(NamedTuple):
    t_s: float
    util_pct: float | None
    hbm_bytes: int | None


class HbmSteps(NamedTuple):
    """A chip's HBM over a window: its points and their report-to-report rates."""

    rate_bytes_per_s: float  # the median rate
    window_s: float  # from the first point to the last
    samples: int  # points
    rising_share: float  # share of the rates that are growth
    latest_bytes: int


class ChipHistory:
    """The last HISTORY_SAMPLES samples of one chip, oldest first, in preallocated arrays, with
    the running window figures (the module docstring).

    Plain number arrays, not a deque of sample objects: at 1,152 hosts x 4 chips x 300 samples
    the garbage collector would otherwise walk 1.4 million objects on every full pass.
    Iterating yields `ChipSample`s (made on demand); an unknown figure is None. Samples are
    numbered from 0 in the order they arrived: sample `n` is at `n % size` while it is kept."""

    __slots__ = (
        "_t_s",
        "_util_pct",
        "_hbm_bytes",
        "_appended",
        "_len",
        "_steady_from",
        "_util_from",
        "_util_sum",
        "_util_bits",
        "_util_count",
        "_hbm_from",
        "_points",
        "_first_point",
        "_rates",
        "_rising",
        "_point_count",
        "_recent_t_s",
        "_recent_bytes",
    )

    def __init__(self, size: int = HISTORY_SAMPLES):
        self._t_s = array("d", bytes(8 * size))
        self._util_pct = array("d", bytes(8 * size))
        self._hbm_bytes = array("q", bytes(8 * size))  # -1: unknown
        self._appended = 0
        self._len = 0
        self._steady_from = 0  # the oldest sample from which times never decrease
        # utilisation over UTIL_WINDOW_S up to the newest sample: its first sample, exact sum, count
        self._util_from = 0
        self._util_sum = 0  # exactly _util_sum * 2**-_util_bits
        self._util_bits = 0
        self._util_count = 0
        # HBM over HBM_TREND_WINDOW_S up to the newest sample: its first sample, its points and the
        # first of them, their rates (sorted) and how many of those grew; the newest points (a ring)
        self._hbm_from = 0
        self._points = 0
        self._first_point = 0
        self._rates: list[float] = []
        self._rising = 0
        self._point_count = 0  # points ever: point p is at p % HBM_TREND_MIN_SAMPLES of the two below
        self._recent_t_s = array("d", bytes(8 * HBM_TREND_MIN_SAMPLES))
        self._recent_bytes = array("q", bytes(8 * HBM_TREND_MIN_SAMPLES))

    def append(self, t_s: float, util_pct: float | None, hbm_bytes: int | None) -> None:
        times = self._t_s
        size, n = len(times), self._appended
        if self._len == size:  # the oldest sample is overwritten: it leaves the windows first
            if self._util_from == n - size:
                self._leave_util_window(n - size)
            if self._hbm_from == n - size:
                self._leave_hbm_window(n - size)
        else:
            self._len += 1
        i = n % size
        if n and t_s < times[i - 1]:  # (i - 1 is -1, the last slot, when i is 0)
            self._steady_from = n
        times[i] = t_s
        self._util_pct[i] = math.nan if util_pct is None else util_pct
        self._hbm_bytes[i] = -1 if hbm_bytes is None else min(hbm_bytes, MAX_HISTORY_BYTES)
        self._appended = n + 1
        if util_pct is not None:
            self._add_util(util_pct, 1)
        if hbm_bytes is not None:
            self._add_point(n)
        while self._util_from < n and t_s - times[self._util_from % size] > UTIL_WINDOW_S:
            self._leave_util_window(self._util_from)
        while self._hbm_from < n and t_s - times[self._hbm_from % size] > HBM_TREND_WINDOW_S:
            self._leave_hbm_window(self._hbm_from)

    def _add_point(self, n: int) -> None:
        """Sample `n`, just written, has an HBM figure: the window's newest point."""
        size, recent = len(self._t_s), HBM_TREND_MIN_SAMPLES
        t_s, hbm = self._t_s[n % size], self._hbm_bytes[n % size]
        if self._points:
            slot = (self._point_count - 1) % recent  # the window's newest point so far
            prior_t_s, prior_bytes = self._recent_t_s[slot], self._recent_bytes[slot]
            if t_s > prior_t_s:
                insort(self._rates, (hbm - prior_bytes) / (t_s - prior_t_s))
                self._rising += hbm > prior_bytes
        else:
            self._first_point = n
        self._recent_t_s[self._point_count % recent], self._recent_bytes[self._point_count % recent] = t_s, hbm
        self._point_count += 1
        self._points += 1

    def _leave_util_window(self, n: int) -> None:
        """Sample `n`, the window's first, leaves it."""
        util = self._util_pct[n % len(self._t_s)]
        if util == util:
            self._add_util(util, -1)
        self._util_from = n + 1

    def _add_util(self, util: float, sign: int) -> None:
        """Add (`sign` 1) or take away (-1) one figure of the window's exact sum."""
        numerator, bits = _exact(util)
        if bits > self._util_bits:
            self._util_sum <<= bits - self._util_bits
            self._util_bits = bits
        self._util_sum += sign * (numerator << (self._util_bits - bits))
        self._util_count += sign
        if not self._util_count:  # empty: the next figure sets how fine the sum must be
            self._util_sum = self._util_bits = 0

    def _leave_hbm_window(self, n: int) -> None:
        """Sample `n`, the window's first, leaves it."""
        self._hbm_from = n + 1
        size = len(self._t_s)
        if self._points == 0 or n != self._first_point:
            return  # not a point
        self._points -= 1
        if not self._points:
            return
        t_s, hbm = self._t_s[n % size], self._hbm_bytes[n % size]
        following = n + 1
        while self._hbm_bytes[following % size] < 0:
            following += 1
        next_t_s, next_bytes = self._t_s[following % size], self._hbm_bytes[following % size]
        if next_t_s > t_s:
            rates = self._rates
            del rates[bisect_left(rates, (next_bytes - hbm) / (next_t_s - t_s))]
            self._rising -= next_bytes > hbm
        self._first_point = following

    def __len__(self) -> int:
        return self._len

    def __iter__(self):
        size = len(self._t_s)
        for n in range(self._appended - self._len, self._appended):
            yield self._sample(n % size)

    def __reversed__(self):
        """Newest first."""
        size = len(self._t_s)
        for n in range(self._appended - 1, self._appended - self._len - 1, -1):
            yield self._sample(n % size)

    def _sample(self, i: int) -> ChipSample:
        util, hbm = self._util_pct[i], self._hbm_bytes[i]
        return ChipSample(self._t_s[i], None if util != util else util, None if hbm < 0 else hbm)

    def _window(self, at_s: float, window_s: float):
        """Ring positions of the samples a walk back from `at_s` over `window_s` reads, newest
        first: it passes samples after `at_s` and stops at the first older than the window."""
        size, t = len(self._t_s), self._t_s
        for n in range(self._appended - 1, self._appended - self._len - 1, -1):
            i = n % size
            if at_s - t[i] > window_s:
                return
            if t[i] <= at_s:
                yield i

    def _running(self, window_from: int, at_s: float) -> bool:
        """Whether the running values of the window from sample `window_from` are what the walk
        back from `at_s` reads: `at_s` is the newest sample's time, and times never decrease from
        the sample the walk stops at (or the oldest kept) to the newest."""
        if not self._len:
            return True  # nothing kept: both read nothing
        if at_s != self._t_s[(self._appended - 1) % len(self._t_s)]:
            return False
        oldest = self._appended - self._len
        return self._steady_from <= (window_from - 1 if window_from > oldest else oldest)

    def util_mean_pct(self, at_s: float) -> float | None:
        """The mean of the known utilisation figures over the UTIL_WINDOW_S up to `at_s` (exact,
        rounded once); None without one."""
        if self._running(self._util_from, at_s):
            return exact_mean(self._util_sum, self._util_bits, self._util_count) if self._util_count else None
        figures = [_exact(u) for i in self._window(at_s, UTIL_WINDOW_S) if (u := self._util_pct[i]) == u]
        if not figures:
            return None
        bits = max(b for _, b in figures)
        return exact_mean(sum(m << (bits - b) for m, b in figures), bits, len(figures))

    def hbm_steps(self, at_s: float) -> HbmSteps | None:
        """The HBM points over the HBM_TREND_WINDOW_S up to `at_s` and their rates; None with fewer
        than HBM_TREND_MIN_SAMPLES points or no rate (every point at one time)."""
        if self._running(self._hbm_from, at_s):
            rates, points = self._rates, self._points
            if points < HBM_TREND_MIN_SAMPLES or not rates:
                return None
            size, k = len(self._t_s), len(rates)
            rate = rates[k // 2] if k % 2 else (rates[k // 2 - 1] + rates[k // 2]) / 2  # statistics.median's
            newest = self._recent_bytes[(self._point_count - 1) % HBM_TREND_MIN_SAMPLES]
            last_point_t_s = self._recent_t_s[(self._point_count - 1) % HBM_TREND_MIN_SAMPLES]
            span_s = last_point_t_s - self._t_s[self._first_point % size]
            return HbmSteps(rate, span_s, points, self._rising / k, newest)
        window = [(self._t_s[i], self._hbm_bytes[i]) for i in self._window(at_s, HBM_TREND_WINDOW_S)]
        known = [point for point in reversed(window) if point[1] >= 0]  # oldest first
        if len(known) < HBM_TREND_MIN_SAMPLES:
            return None
        steps = [((b - a) / (u - t), b > a) for (t, a), (u, b) in pairwise(known) if u > t]
        if not steps:
            return None
        rising = sum(1 for _, up in steps if up) / len(steps)
        return HbmSteps(median(r for r, _ in steps), known[-1][0] - known[0][0], len(known), rising, known[-1][1])

    def hbm_growth_per_s(self, count: int, until_s: float) -> float | None:
        """HBM's growth rate from the `count`-th newest sample with an HBM figure at or before
        `until_s` to the newest (`count` at most HBM_TREND_MIN_SAMPLES); None with fewer such
        samples or no time between them."""
        if self._points >= count and self._running(self._hbm_from, until_s):
            recent, newest = HBM_TREND_MIN_SAMPLES, self._point_count - 1
            first, last = (newest - count + 1) % recent, newest % recent
            t0, t1 = self._recent_t_s[first], self._recent_t_s[last]
            b0, b1 = self._recent_bytes[first], self._recent_bytes[last]
        else:
            size, t_s, hbm_bytes = len(self._t_s), self._t_s, self._hbm_bytes
            found = [
                i
                for i in (n % size for n in range(self._appended - 1, self._appended - self._len - 1, -1))
                if t_s[i] <= until_s and hbm_bytes[i] >= 0
            ][:count]
            if len(found) < count:
                return None
            t0, t1, b0, b1 = t_s[found[-1]], t_s[found[0]], hbm_bytes[found[-1]], hbm_bytes[found[0]]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else None
