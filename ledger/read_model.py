"""The read model: every figure derived from the ledger at one "now", typed, for every output.

`Ledger.read(now_s)` gives one `ReadModel` per ledger state and "now": each figure in it (every
host's freshness, each source's state, the job's diagnosis, the current findings, the cluster and
UltraServer rollups, each host's and chip's latest figures) is computed the first time a reader
asks and then fixed, so the readers of one refresh (the screen's views and status line, the
session's incidents, the metrics endpoint, a snapshot) compute each once and read the same
objects. A new line, link event or end (`Ledger.generation`), or another "now", is another read
model.

What costs a walk over a host's counters or history (each chip's ECC totals, HBM trends, the
chip figures) is kept from one read model to the next in `Kept`, per report of the host, so a
refresh at 1,152 hosts pays only for the hosts that reported since the last one; an UltraServer's
rollup is kept until one of its hosts changes, the cluster's totals until one of its rows does.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

from trnwatch.ledger.findings import (
    ChipToLook,
    Context,
    Finding,
    HbmTrend,
    chips_to_look_at,
    current_findings,
    hbm_trend,
    trend_at_s,
)
from trnwatch.ledger.hosts import ChipState, HostState
from trnwatch.ledger.job import JobDiagnosis
from trnwatch.ledger.lag import BEHIND_AFTER_S
from trnwatch.ledger.rollups import (
    ChipEcc,
    ClusterRollup,
    Freshness,
    Kept,
    KeptRow,
    UltraServerRollup,
    hbm_fill_pct,
    host_ecc,
    reported_within,
    stale_after_s,
    summed,
)
from trnwatch.ledger.sysfs_host import EfaRollup, efa_rollup

if TYPE_CHECKING:
    from trnwatch.ledger.job_summary import JobSection
    from trnwatch.ledger.ledger import Ledger, SourceState

# Job sources read by a file follower that marks how far it has read (ledger/lag.py): rank files.
FOLLOWED_JOB_PREFIXES = ("job:", "job-dir:")

NO_GROUP = ""  # the group of hosts not mapped to any UltraServer


@dataclass(frozen=True, slots=True)
class ChipSummary:
    """One chip's latest figures, as every view lists it."""

    host_id: str
    index: int
    util_pct: float | None
    hbm_bytes: int | None
    hbm_capacity_bytes: int | None
    ecc_events: int  # ECC events in the window (corrected + uncorrected, mem + sram)
    ecc_uncorrected: int
    ecc_undecided: bool  # a counter whose reading is undecided and whose readings disagree
    hw_errors: int = 0  # distinct NEURON_HW_ERR faults the kernel log placed on this chip

    @property
    def hbm_pct(self) -> float | None:
        return hbm_fill_pct(self.hbm_bytes, self.hbm_capacity_bytes)


@dataclass(frozen=True, slots=True)
class HostSummary:
    """One host at "now": its number in its group, identity, freshness and chips."""

    number: int  # position in its group by name: a short, stable label
    host_id: str
    name: str | None
    source_id: str
    state: Freshness
    age_s: float | None  # since its last report
    chips: tuple[ChipSummary, ...]


def chip_summary(host: HostState, chip: ChipState, ecc: ChipEcc, hw_errors: int = 0) -> ChipSummary:
    return ChipSummary(
        host.host_id,
        chip.index,
        chip.util_pct,
        chip.hbm_bytes,
        chip.hbm_capacity_bytes,
        ecc.events,
        ecc.uncorrected,
        ecc.undecided,
        hw_errors,
    )


@lru_cache(maxsize=8192)  # one per host name: the rows are ordered at every refresh
def _natural(text: str) -> tuple:
    """Sort key that puts "host-9" before "host-10"."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


@dataclass(frozen=True, eq=False)
class ReadModel:
    """The ledger's figures at `now_s` for one ledger state (`generation`): computed on first
    read, then fixed. Build it with `Ledger.read(now_s)`."""

    ledger: "Ledger"
    now_s: float
    generation: int
    kept: Kept

    # --- sources and hosts ------------------------------------------------------------------------

    @cached_property
    def source_periods_s(self) -> Mapping[str, float]:
        """Report period per source: the longest of the hosts it feeds (a Prometheus server
        feeds many), so no host of a slow-reporting source is judged stale by a faster one's period."""
        periods: dict[str, float] = {}
        for host in self.ledger.hosts.values():
            if host.period_s:
                periods[host.source_id] = max(host.period_s, periods.get(host.source_id, 0.0))
        return periods

    @cached_property
    def source_states(self) -> Mapping[str, "SourceState"]:
        """Every source's state, each judged against the report period of the host(s) it feeds,
        at what was read of it (a job file at the job's `job_judged_s`, the others at `host_judged_s`)."""
        periods = self.source_periods_s
        host_s, job_s = self.host_judged_s, self.job_judged_s
        return {
            sid: s.state(job_s if s.kind == "job" else host_s, periods.get(sid))
            for sid, s in self.ledger.sources.items()
        }

    # --- the monitor's own lag (ledger/lag.py) ----------------------------------------------------

    @cached_property
    def host_judged_s(self) -> float:
        """The moment hosts are judged at: "now", never past what the session has read."""
        return self.ledger.lag.host_judged_s(self.now_s)

    @cached_property
    def job_judged_s(self) -> float:
        """The moment the job is judged at: "now", never past where its followers are caught up."""
        unfollowed = any(
            s.kind == "job" and not s.source_id.startswith(FOLLOWED_JOB_PREFIXES) for s in self.ledger.sources.values()
        )
        return self.ledger.lag.job_judged_s(self.now_s, unfollowed)

    @cached_property
    def behind(self) -> Mapping[str, float]:
        """The sources trnwatch is more than BEHIND_AFTER_S behind on, and by how many seconds,
        most behind first (`lag.INTAKE`: the sources that push lines, after a pause or a full queue)."""
        behind = self.ledger.lag.behind_s(self.now_s)
        return dict(sorted(((k, v) for k, v in behind.items() if v > BEHIND_AFTER_S), key=lambda kv: (-kv[1], kv[0])))

    @cached_property
    def freshness(self) -> Mapping[str, Freshness]:
        """Every host's freshness by host id: fresh (in every figure), stale (reports stopped:
        last figures shown with their age, left out of rollups) or lost (its source ended with
        an error or its link is down). Each source's state once (a Prometheus server feeds every host)."""
        ledger, now_s = self.ledger, self.host_judged_s
        periods_s = self.source_periods_s
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

    def host_age_s(self, host: HostState) -> float | None:
        """Seconds since `host`'s last report, at the moment its freshness is judged
        (`host_judged_s`): the age every output shows beside the state (None: it never reported)."""
        return None if host.last_s is None else max(0.0, self.host_judged_s - host.last_s)

    @cached_property
    def hosts_by_group(self) -> Mapping[str, tuple[HostState, ...]]:
        """Hosts by group, groups in order (UltraServer ids, then NO_GROUP)."""
        by_group: dict[str, list[HostState]] = {}
        for host in self.ledger.hosts.values():
            by_group.setdefault(self.ledger.ultraserver_of(host) or NO_GROUP, []).append(host)
        return {g: tuple(by_group[g]) for g in sorted(by_group, key=lambda g: (g == NO_GROUP, g))}

    @property
    def groups(self) -> list[str]:
        """UltraServer ids in order, then NO_GROUP if some hosts are mapped to none."""
        return list(self.hosts_by_group)

    def group_hosts(self, group: str) -> list[HostState]:
        return list(self.hosts_by_group.get(group, ()))

    # --- chips and hosts --------------------------------------------------------------------------

    def host_ecc(self, host: HostState) -> tuple[ChipEcc, ...]:
        """`chip_ecc` of each of the host's chips, in chip order (computed once per report)."""
        return host_ecc(self.kept, host)

    def chips_of(self, host: HostState) -> tuple[ChipSummary, ...]:
        """Each chip of `host`, in chip order: computed once per report of the host (its chips'
        figures and ECC change only when it folds one) or kernel-log hardware error."""
        ledger = self.ledger

        def summaries(h: HostState) -> tuple[ChipSummary, ...]:
            faults = ledger.hardware_faults_by_chip(h) if ledger.kernel.errors else {}
            return tuple(
                chip_summary(h, c, e, faults.get(c.index, 0)) for c, e in zip(h.chips, self.host_ecc(h), strict=True)
            )

        return self.kept.per_host_report(host, "chip-summaries", summaries, ledger.kernel.lines_folded)

    def hosts(self, hosts: list[HostState]) -> list[HostSummary]:
        """`hosts`, numbered in natural order of their names (instance name, else stream label),
        so numbers follow the names people use; sorting the grid never renumbers."""
        ordered = sorted(hosts, key=lambda h: (_natural(h.instance_name or h.source_id), h.host_id))
        freshness = self.freshness
        return [
            HostSummary(
                number=i,
                host_id=h.host_id,
                name=h.instance_name,
                source_id=h.source_id,
                state=freshness[h.host_id],
                age_s=self.host_age_s(h),
                chips=self.chips_of(h),
            )
            for i, h in enumerate(ordered)
        ]

    def hbm_trend(self, host: HostState, index: int) -> HbmTrend | None:
        """Chip `index` of `host`: its HBM trend up to its host's latest report (None: too few reports)."""
        return hbm_trend(host.chips[index], trend_at_s(host, self.now_s))

    # --- UltraServers and the cluster -------------------------------------------------------------

    @cached_property
    def configured_members(self) -> Mapping[str, set[str]]:
        """UltraServer id -> its members' keys as `--ultraservers` configured them."""
        members: dict[str, set[str]] = {}
        for key, us in self.ledger.ultraserver_overrides.items():
            members.setdefault(us, set()).add(key)
        return members

    def silent_members(self, ultraserver: str, hosts: list[HostState]) -> int:
        """Configured members of `ultraserver` (by host id or stream label) that none of its
        `hosts` is: they never reported."""
        members = self.configured_members.get(ultraserver)
        if not members:
            return 0
        return len(members - {key for h in hosts for key in (h.host_id, h.source_id)})

    def ultraserver(self, ultraserver: str, hosts: list[HostState]) -> UltraServerRollup:
        """Latest figures of `hosts` (one UltraServer), counting only hosts whose data is fresh
        and configured members that never reported (as silent)."""
        silent = self.silent_members(ultraserver, hosts) if ultraserver else 0
        return self._row(ultraserver, hosts, silent).row

    def _row(self, ultraserver: str, hosts: list[HostState], silent: int) -> KeptRow:
        """The rollup of one UltraServer's `hosts`, kept until one of its hosts folded a report,
        changed freshness, joined or left: a key pressed while a refresh folds (at 1,152 hosts,
        every few milliseconds a new ledger generation) pays for the UltraServers whose hosts
        reported since, not for all of them."""
        freshness = self.freshness
        states = [freshness[h.host_id] for h in hosts]
        key = (silent, tuple(map(id, hosts)), tuple([h.reports for h in hosts]), tuple(states))
        kept = self.kept.rows.get(ultraserver)
        if kept is not None and kept.key == key:
            return kept
        fresh = [h for h, state in zip(hosts, states, strict=True) if state == "fresh"]
        row = UltraServerRollup(
            ultraserver=ultraserver,
            hosts_total=len(hosts) + silent,
            hosts_fresh=len(fresh),
            hosts_stale=states.count("stale"),
            hosts_lost=states.count("lost"),
            hosts_silent=silent,
            chips_total=sum(len(h.chips) for h in hosts),
            **summed(fresh, self.host_ecc),
        )
        kept = self.kept.rows[ultraserver] = KeptRow(key, list(hosts), row, fresh)
        return kept

    @cached_property
    def cluster(self) -> ClusterRollup:
        """One row per UltraServer (configured or reported), hosts in no UltraServer in a row of
        their own, and the totals; figures over fresh hosts only. A configured member that
        never reported counts in `hosts_total` (as silent), never as fresh."""
        placed: dict[str, list[HostState]] = {}
        loose: list[HostState] = []
        for host in self.ledger.hosts.values():
            us = self.ledger.ultraserver_of(host)
            if us is None:
                loose.append(host)
            else:
                placed.setdefault(us, []).append(host)
        rows = []
        keys = []  # each row's key: the totals below are kept while no row changed
        fresh: list[HostState] = []  # every fresh host, row by row
        for us in sorted(set(placed) | set(self.configured_members)):
            hosts = placed.get(us, [])
            kept = self._row(us, hosts, self.silent_members(us, hosts))
            rows.append(kept.row)
            fresh.extend(kept.fresh)
            keys.append(kept.key)
        unplaced = None
        if loose:
            kept = self._row("", loose, 0)
            unplaced = kept.row
            fresh.extend(kept.fresh)
            keys.append(kept.key)
        everything = rows + ([unplaced] if unplaced else [])
        counts = ("hosts_total", "hosts_fresh", "hosts_stale", "hosts_lost", "hosts_silent", "chips_total")
        if self.kept.totals is None or self.kept.totals[0] != keys:
            self.kept.totals = (keys, summed(fresh, self.host_ecc))
        return ClusterRollup(
            ultraservers=rows,
            unplaced=unplaced,
            **{name: sum(getattr(r, name) for r in everything) for name in counts},
            **self.kept.totals[1],
        )

    # --- EFA (sysfs) ------------------------------------------------------------------------------

    @cached_property
    def sysfs_sampled(self) -> bool:
        """Whether sysfs is sampled at all (`--sysfs`, or each host's over SSH): without it no
        output shows EFA, not even as unavailable."""
        return bool(self.ledger.sysfs) or any(s.kind == "sysfs" for s in self.ledger.sources.values())

    @cached_property
    def _efa_by_group(self) -> Mapping[str, EfaRollup]:
        return {
            group: efa_rollup((h.host_id for h in hosts), self.ledger.sysfs, self.host_judged_s)
            for group, hosts in self.hosts_by_group.items()
        }

    def efa(self, group: str) -> EfaRollup | None:
        """EFA (between UltraServers) of the hosts of `group` (an UltraServer id, or NO_GROUP);
        None when sysfs is not sampled, `hosts` 0 when none of them gave rates (unavailable)."""
        if not self.sysfs_sampled:
            return None
        return self._efa_by_group.get(group) or efa_rollup((), self.ledger.sysfs, self.host_judged_s)

    @cached_property
    def efa_cluster(self) -> EfaRollup | None:
        """EFA of every host, those sysfs names that no report does too (None: sysfs not sampled)."""
        if not self.sysfs_sampled:
            return None
        return efa_rollup(set(self.ledger.hosts) | set(self.ledger.sysfs), self.ledger.sysfs, self.host_judged_s)

    # --- the job and the findings -----------------------------------------------------------------

    def chip_util_pct(self, host_name: str, chip: int) -> float | None:
        """Latest utilisation of a rank's chip for the job's device evidence: None when the host
        is unknown or not fresh (`freshness`, the one rule)."""
        host = self.ledger.host_named(host_name)
        if host is None or not 0 <= chip < len(host.chips) or self.freshness[host.host_id] != "fresh":
            return None
        return host.chips[chip].util_pct

    @cached_property
    def diagnosis(self) -> JobDiagnosis | None:
        """The job's verdict with device evidence joined in (None without job data), judged at
        `job_judged_s`: only on what was read."""
        job = self.ledger.job
        return None if job is None else job.diagnose(self.job_judged_s, self.chip_util_pct, self.ledger.rank_processes)

    @cached_property
    def job_summary(self) -> "JobSection | None":
        """The job section (receipt, snapshot, job view): `diagnosis`, not judged again, and the run's figures."""
        job = self.ledger.job
        return (
            None
            if job is None
            else job.summary(self.job_judged_s, self.chip_util_pct, self.diagnosis, self.ledger.rank_processes)
        )

    @cached_property
    def suspects_by_ultraserver(self) -> tuple[Mapping[str, list[int]], list[int]]:
        """Where the suspect ranks run: UltraServer id ("" for hosts in none) -> ranks, and the
        ranks on a host the device telemetry does not show (rank host -> ledger host -> UltraServer)."""
        placed: dict[str, list[int]] = {}
        unseen: list[int] = []
        diagnosis = self.diagnosis
        for suspect in diagnosis.suspects if diagnosis is not None else ():
            host = self.ledger.host_named(suspect.host) if suspect.host else None
            if host is None:
                unseen.append(suspect.rank)
            else:
                placed.setdefault(self.ledger.ultraserver_of(host) or "", []).append(suspect.rank)
        return placed, sorted(unseen)

    @cached_property
    def findings(self) -> tuple[Finding, ...]:
        """Every current finding of every rule (ledger/findings.py), most severe first."""
        context = Context(self.ledger, self.host_judged_s, self.diagnosis, self.freshness, self.kept, self.behind)
        return tuple(current_findings(context))

    def chips_to_look_at(self, hosts: list[HostState], findings: tuple[Finding, ...], limit: int) -> list[ChipToLook]:
        """The fresh chips of `hosts` that most need a look, with why (`findings.chips_to_look_at`)."""
        fresh = [h for h in hosts if self.freshness[h.host_id] == "fresh"]
        return chips_to_look_at(self.kept, fresh, findings, limit)
