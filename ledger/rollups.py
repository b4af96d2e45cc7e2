"""Derived figures: the one place each is defined, read by every view, receipt and snapshot.

The ledger folds what sources delivered; everything derived from it that more than one reader
shows is defined here once, so a chip's HBM fill, "this chip had ECC", an UltraServer's sums and
the stale rule cannot drift apart between the screen, the snapshot and the receipt. Pure
functions of ledger state; the read model (ledger/read_model.py) computes them at one "now"
and keeps what costs a walk over a host's counters or history (`Kept`: each chip's ECC totals,
HBM trends) once per report of the host, not once per repaint.
"""

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from itertools import chain
from typing import Literal, TypeVar

from trnwatch.ledger.chips import ECC_CORRECTED_FIELDS, ECC_UNCORRECTED_FIELDS
from trnwatch.ledger.hosts import ChipState, HostState

# A source or host is stale when nothing arrived for this many report periods (and at least
# STALE_MIN_S): one late report is jitter, three missed ones are a problem.
STALE_PERIODS = 3
STALE_MIN_S = 5.0


def stale_after_s(period_s: float | None) -> float:
    """How long without a report before figures from a stream count as stale."""
    return max(STALE_PERIODS * (period_s or 1.0), STALE_MIN_S)


def reported_within(host: HostState, now_s: float, after_s: float) -> bool:
    """Whether `host` reported in the `after_s` before `now_s` (`stale_after_s` of its period)."""
    return host.last_s is not None and now_s - host.last_s <= after_s


# A chip (or an UltraServer, a cluster) at this HBM fill or more is drawn as nearly full and
# passes the `hbm-high` filter.
HBM_HIGH_PCT = 90.0
# neuron-monitor's `neuron_hw_counters` fields, split by what they mean for the chip: a
# corrected error is noted, an uncorrected one is data loss (a fault of its own severity).

Freshness = Literal["fresh", "stale", "lost"]
T = TypeVar("T")


# --- one chip -----------------------------------------------------------------------------------


def hbm_fill_pct(used_bytes: int | None, capacity_bytes: int | None) -> float | None:
    """HBM in use as a share of capacity; None when either is unknown (or capacity is 0)."""
    if used_bytes is None or not capacity_bytes:
        return None
    return 100.0 * used_bytes / capacity_bytes


def known_sum(values: list[int | None]) -> int | None:
    """The sum of `values`, or None when any of them is unknown: a total is never a guess."""
    known = [value for value in values if value is not None]
    return sum(known) if len(known) == len(values) else None


def hbm_high(fill_pct: float | None) -> bool:
    return fill_pct is not None and fill_pct >= HBM_HIGH_PCT


@dataclass(frozen=True, slots=True)
class ChipEcc:
    """A chip's ECC events in the window, under its counter reading (`CounterFamily.totals`)."""

    corrected: int
    uncorrected: int
    undecided: bool  # some counter's two readings disagree: its total is unknown

    @property
    def events(self) -> int:
        return self.corrected + self.uncorrected

    @property
    def had_ecc(self) -> bool:
        return self.events > 0


NO_ECC = ChipEcc(0, 0, False)


def chip_ecc(chip: ChipState) -> ChipEcc:
    # The common case, decided without a reading: no counter ever non-zero is no event under any.
    if not chip.ecc.nonzero:
        return NO_ECC
    totals = chip.ecc.totals()
    return ChipEcc(
        corrected=sum(totals.get(k) or 0 for k in ECC_CORRECTED_FIELDS),
        uncorrected=sum(totals.get(k) or 0 for k in ECC_UNCORRECTED_FIELDS),
        undecided=None in totals.values(),
    )


@dataclass(slots=True)
class KeptRow:
    """An UltraServer's rollup as kept (`Kept.rows`), with the key it is kept under."""

    key: tuple
    hosts: list[HostState]  # held so no host id in `key` is reused while it is kept
    row: "UltraServerRollup"
    fresh: list[HostState]


@dataclass(slots=True)
class Kept:
    """Figures kept from one read model (ledger/read_model.py) to the next: per host report
    (name, host id -> (host, its report count, what else it depends on, the figure)), each
    UltraServer's row until one of its hosts changes, the cluster's totals until a row does."""

    per_report: dict[tuple[str, str], tuple[HostState, int, Hashable, object]] = field(default_factory=dict)
    rows: dict[str, KeptRow] = field(default_factory=dict)
    totals: tuple[list[tuple], dict] | None = None

    def per_host_report(self, host: HostState, name: str, compute: Callable[[HostState], T], at: Hashable = None) -> T:
        """`compute(host)`, kept under `name` until `host` folds its next report (or `at`, what
        else the figure depends on, changes)."""
        key = (name, host.host_id)
        kept = self.per_report.get(key)
        if kept is not None and kept[0] is host and kept[1] == host.reports and kept[2] == at:
            return kept[3]  # type: ignore[return-value]  # stored by this method under `name`: a T
        value = compute(host)
        self.per_report[key] = (host, host.reports, at, value)
        return value

    def forget(self, host_id: str) -> None:
        """Drop what is kept per report of a host the ledger forgot (it keeps no figure of it)."""
        for key in [key for key in self.per_report if key[1] == host_id]:
            del self.per_report[key]


def host_ecc(kept: Kept, host: HostState) -> tuple[ChipEcc, ...]:
    """`chip_ecc` of each of the host's chips, in chip order (computed once per report)."""
    return kept.per_host_report(host, "ecc", lambda h: tuple(chip_ecc(c) for c in h.chips))


# --- UltraServer and cluster sums -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rollup:
    """Latest figures over the fresh hosts of a set of hosts, with its boundary: how many hosts
    it has, how many are in the figures, and why the others are not."""

    hosts_total: int  # reported, plus configured members that never reported (`hosts_silent`)
    hosts_fresh: int
    hosts_stale: int
    hosts_lost: int
    hosts_silent: int
    chips: int  # on fresh hosts: the chips in the figures
    chips_total: int  # on every host that reported, fresh or not
    hbm_used_bytes: int
    hbm_capacity_bytes: int | None  # None when any fresh chip's capacity is unknown
    util_mean_pct: float | None  # mean over fresh chips (each chip weighs the same)
    util_min_pct: float | None
    chips_idle: int  # fresh chips at exactly 0% utilisation
    chips_with_ecc: int
    chips_with_uncorrected_ecc: int

    @property
    def hosts_left_out(self) -> int:
        """Hosts not in the figures: stale, lost, or never reported."""
        return self.hosts_total - self.hosts_fresh

    @property
    def hbm_fill_pct(self) -> float | None:
        return hbm_fill_pct(self.hbm_used_bytes if self.chips else None, self.hbm_capacity_bytes)


@dataclass(frozen=True, slots=True)
class UltraServerRollup(Rollup):
    """One UltraServer (or, with id "", the hosts mapped to none)."""

    ultraserver: str


@dataclass(frozen=True, slots=True)
class ClusterRollup(Rollup):
    """The whole cluster: its totals, one row per UltraServer, and the hosts in none."""

    ultraservers: list[UltraServerRollup]
    unplaced: UltraServerRollup | None  # hosts mapped to no UltraServer (id ""), if any

    @property
    def rows(self) -> list[UltraServerRollup]:
        return self.ultraservers + ([self.unplaced] if self.unplaced else [])


def summed(fresh: list[HostState], ecc_of: Callable[[HostState], tuple[ChipEcc, ...]]) -> dict:
    """The chip figures over fresh hosts, from each host's `figures` (added up in its fold).
    The mean is `math.fsum`'s: exact, so the same in whatever order the hosts are added up
    (per UltraServer or over the cluster)."""
    figures = [h.figures for h in fresh]
    known_utils = sum(len(f.utils) for f in figures)
    mins = [f.util_min_pct for f in figures if f.util_min_pct is not None]
    ecc = [e for h in fresh if h.figures.ecc_seen for e in ecc_of(h)]
    return dict(
        chips=sum(f.chips for f in figures),
        hbm_used_bytes=sum(f.hbm_used_bytes for f in figures),
        hbm_capacity_bytes=known_sum([f.hbm_capacity_bytes for f in figures]),
        util_mean_pct=math.fsum(chain.from_iterable(f.utils for f in figures)) / known_utils if known_utils else None,
        util_min_pct=min(mins) if mins else None,
        chips_idle=sum(f.chips_idle for f in figures),
        chips_with_ecc=sum(1 for e in ecc if e.had_ecc),
        chips_with_uncorrected_ecc=sum(1 for e in ecc if e.uncorrected),
    )
