"""Derived figures: the one place each is computed, read by every view, receipt and snapshot.

The ledger folds what sources delivered; everything derived from it that more than one reader
shows is defined here once, so a chip's HBM fill, "this chip had ECC", an UltraServer's sums,
a host's freshness, the job-device join and the hosts left out of a figure cannot drift apart
between the screen, the snapshot and the receipt. Pure functions of ledger state and "now".

Figures that cost a walk over a host's counters or history (each chip's ECC totals, HBM trends)
are computed once per report of the host, not once per repaint: `per_report` keeps them in the
ledger's `derived` until the host folds its next report (`HostState.reports` counts them), so a
repaint at 1,152 hosts pays only for the hosts that reported since the last one. Figures of the
whole ledger at one "now" (every host's freshness, each source's period) are kept by
`per_update` until the ledger changes (`Ledger.generation`) or "now" moves, so the readers of one
refresh (findings, rollups, the views' rows, the status line) compute them once.
"""

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Literal, TypeVar

from trnwatch.ledger.chips import ECC_CORRECTED_FIELDS, ECC_UNCORRECTED_FIELDS
from trnwatch.ledger.hosts import ChipState, HostState
from trnwatch.ledger.job import JobDiagnosis

if TYPE_CHECKING:
    from trnwatch.ledger.ledger import Ledger

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


def per_report(
    ledger: "Ledger", host: HostState, name: str, compute: Callable[[HostState], T], at: Hashable = None
) -> T:
    """`compute(host)`, kept under `name` until `host` folds its next report (or `at`, what else
    the figure depends on, changes)."""
    key = (name, host.host_id)
    kept = ledger.derived.get(key)
    if kept is not None and kept[0] is host and kept[1] == host.reports and kept[2] == at:
        return kept[3]
    value = compute(host)
    ledger.derived[key] = (host, host.reports, at, value)
    return value


def per_update(ledger: "Ledger", name: str, compute: Callable[[], T], at: Hashable = None) -> T:
    """`compute()`, kept under `name` until the ledger changes (or `at` does)."""
    key = (name, "")
    kept = ledger.derived.get(key)
    if kept is not None and kept[0] == ledger.generation and kept[1] == at:
        return kept[2]
    value = compute()
    ledger.derived[key] = (ledger.generation, at, value)
    return value


def host_ecc(ledger: "Ledger", host: HostState) -> tuple[ChipEcc, ...]:
    """`chip_ecc` of each of the host's chips, in chip order (computed once per report)."""
    return per_report(ledger, host, "ecc", lambda h: tuple(chip_ecc(c) for c in h.chips))


# --- hosts and sources ----------------------------------------------------------------------------


def source_periods_s(ledger: "Ledger") -> dict[str, float]:
    """Report period per source: the longest of the hosts it feeds (a Prometheus server feeds
    many), so no host of a slow-reporting source is judged stale by a faster one's period."""
    return per_update(ledger, "source-periods", lambda: _source_periods_s(ledger))


def _source_periods_s(ledger: "Ledger") -> dict[str, float]:
    periods: dict[str, float] = {}
    for host in ledger.hosts.values():
        if host.period_s:
            periods[host.source_id] = max(host.period_s, periods.get(host.source_id, 0.0))
    return periods


def freshness_at(ledger: "Ledger", now_s: float) -> dict[str, Freshness]:
    """Every host's freshness at `now_s`, by host id: fresh (in every figure), stale (reports
    stopped: last figures shown with their age, left out of rollups) or lost (its source ended
    with an error or its link is down). Computed once per refresh, each source's state once
    (a Prometheus server feeds every host)."""

    def compute() -> dict[str, Freshness]:
        periods_s = source_periods_s(ledger)
        lost: dict[str, bool] = {}
        stale_after: dict[float | None, float] = {}  # `stale_after_s` by period: most hosts share one
        freshness: dict[str, Freshness] = {}
        for host in ledger.hosts.values():
            source_id = host.source_id
            if source_id not in lost:
                source = ledger.sources.get(source_id)
                lost[source_id] = source is not None and source.state(now_s, periods_s.get(source_id)) == "lost"
            if lost[source_id]:
                freshness[host.host_id] = "lost"
                continue
            period_s = host.period_s
            after_s = stale_after.get(period_s)
            if after_s is None:
                after_s = stale_after[period_s] = stale_after_s(period_s)
            freshness[host.host_id] = "fresh" if reported_within(host, now_s, after_s) else "stale"
        return freshness

    return per_update(ledger, "freshness", compute, now_s)


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


def _summed(ledger: "Ledger", fresh: list[HostState]) -> dict:
    """The chip figures over fresh hosts, from each host's `figures` (added up in its fold).
    The mean is `math.fsum`'s: exact, so the same in whatever order the hosts are added up
    (per UltraServer or over the cluster)."""
    figures = [h.figures for h in fresh]
    known_utils = sum(len(f.utils) for f in figures)
    mins = [f.util_min_pct for f in figures if f.util_min_pct is not None]
    ecc = [e for h in fresh if h.figures.ecc_seen for e in host_ecc(ledger, h)]
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


def silent_members(ledger: "Ledger", ultraserver: str, hosts: list[HostState]) -> int:
    """Configured members of `ultraserver` (`--ultraservers`: by host id or stream label) that
    none of its `hosts` is: they never reported."""
    members = configured_members(ledger).get(ultraserver)
    if not members:
        return 0
    return len(members - {key for h in hosts for key in (h.host_id, h.source_id)})


def configured_members(ledger: "Ledger") -> dict[str, set[str]]:
    """UltraServer id -> its members' keys as `--ultraservers` configured them (the ledger's
    configuration: computed once, not once per ledger change)."""
    kept = ledger.derived.get(("configured-members", ""))
    if kept is not None and kept[0] is ledger.ultraserver_overrides:
        return kept[1]
    members: dict[str, set[str]] = {}
    for key, us in ledger.ultraserver_overrides.items():
        members.setdefault(us, set()).add(key)
    ledger.derived[("configured-members", "")] = (ledger.ultraserver_overrides, members)
    return members


def ultraserver_rollup(ledger: "Ledger", ultraserver: str, hosts: list[HostState], now_s: float) -> UltraServerRollup:
    """Latest figures of `hosts` (one UltraServer), counting only hosts whose data is fresh and
    configured members that never reported (as silent)."""
    silent = silent_members(ledger, ultraserver, hosts) if ultraserver else 0
    return _row(ledger, ultraserver, hosts, silent, freshness_at(ledger, now_s))[0]


def cluster_rollup(ledger: "Ledger", now_s: float) -> ClusterRollup:
    """One row per UltraServer (configured or reported), hosts in no UltraServer in a row of
    their own, and the totals; figures over fresh hosts only. A configured member that never
    reported counts in `hosts_total` (as silent), never as fresh. Computed once per refresh."""
    return per_update(ledger, "cluster", lambda: _cluster_rollup(ledger, now_s), now_s)


def _cluster_rollup(ledger: "Ledger", now_s: float) -> ClusterRollup:
    freshness = freshness_at(ledger, now_s)
    placed: dict[str, list[HostState]] = {}
    loose: list[HostState] = []
    for host in ledger.hosts.values():
        us = ledger.ultraserver_of(host)
        if us is None:
            loose.append(host)
        else:
            placed.setdefault(us, []).append(host)
    rows = []
    kept = []  # each row's key: the totals below are kept while no row changed
    fresh: list[HostState] = []  # every fresh host, row by row
    for us in sorted(set(placed) | set(configured_members(ledger))):
        hosts = placed.get(us, [])
        row, row_fresh, key = _row(ledger, us, hosts, silent_members(ledger, us, hosts), freshness)
        rows.append(row)
        fresh.extend(row_fresh)
        kept.append(key)
    unplaced = None
    if loose:
        unplaced, row_fresh, key = _row(ledger, "", loose, 0, freshness)
        fresh.extend(row_fresh)
        kept.append(key)
    everything = rows + ([unplaced] if unplaced else [])
    counts = ("hosts_total", "hosts_fresh", "hosts_stale", "hosts_lost", "hosts_silent", "chips_total")
    totals = ledger.derived.get(("cluster-totals", ""))
    if totals is None or totals[0] != kept:
        totals = (kept, _summed(ledger, fresh))
        ledger.derived[("cluster-totals", "")] = totals
    return ClusterRollup(
        ultraservers=rows,
        unplaced=unplaced,
        **{name: sum(getattr(r, name) for r in everything) for name in counts},
        **totals[1],
    )


def _row(
    ledger: "Ledger", ultraserver: str, hosts: list[HostState], silent: int, freshness: dict[str, Freshness]
) -> tuple[UltraServerRollup, list[HostState], tuple]:
    """The rollup of one UltraServer's `hosts` (`silent`: configured members that never
    reported), its fresh hosts, and the key it is kept under: it is computed again only when
    one of its hosts folded a report, changed freshness, joined or left, so a key pressed while
    a refresh folds (at 1,152 hosts, every few milliseconds a new ledger generation) pays for
    the UltraServers whose hosts reported since, not for all of them. The key holds each host's
    `id` and the entry holds the hosts, so no id is reused while the key is kept."""
    states = [freshness[h.host_id] for h in hosts]
    key = (silent, tuple(map(id, hosts)), tuple([h.reports for h in hosts]), tuple(states))
    kept = ledger.derived.get(("ultraserver-row", ultraserver))
    if kept is not None and kept[0] == key:
        return kept[2], kept[3], key
    fresh = [h for h, state in zip(hosts, states, strict=True) if state == "fresh"]
    row = UltraServerRollup(
        ultraserver=ultraserver,
        hosts_total=len(hosts) + silent,
        hosts_fresh=len(fresh),
        hosts_stale=states.count("stale"),
        hosts_lost=states.count("lost"),
        hosts_silent=silent,
        chips_total=sum(len(h.chips) for h in hosts),
        **_summed(ledger, fresh),
    )
    ledger.derived[("ultraserver-row", ultraserver)] = (key, hosts, row, fresh)
    return row, fresh, key


# --- the job on the devices ---------------------------------------------------------------------------


def job_diagnosis_at(ledger: "Ledger", now_s: float) -> JobDiagnosis | None:
    """`Ledger.job_diagnosis(now_s)`, computed once for every reader of one refresh."""
    return per_update(ledger, "job-diagnosis", lambda: ledger.job_diagnosis(now_s), (now_s, id(ledger.job)))


def suspects_by_ultraserver(ledger: "Ledger", diagnosis: JobDiagnosis | None) -> tuple[dict[str, list[int]], list[int]]:
    """Where the suspect ranks run: UltraServer id ("" for hosts in none) -> ranks, and the ranks
    on a host the device telemetry does not show (rank host -> ledger host -> UltraServer)."""
    placed: dict[str, list[int]] = {}
    unseen: list[int] = []
    for suspect in diagnosis.suspects if diagnosis is not None else ():
        host = ledger.host_named(suspect.host) if suspect.host else None
        if host is None:
            unseen.append(suspect.rank)
        else:
            placed.setdefault(ledger.ultraserver_of(host) or "", []).append(suspect.rank)
    return placed, sorted(unseen)
