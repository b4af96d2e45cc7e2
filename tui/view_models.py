"""What each view shows, computed from the ledger: plain data, no Textual, no terminal.

Every view model is built by one function from (ledger, now_s, choices) and carries its own
boundary (how many chips and hosts an aggregate covers), so the widgets only lay text out.
"Now" is the session's clock (`ledger.snapshot.session_now_s`): the wall clock for live and
simulated sessions, the time of the latest line for a replay, a fixed time in tests.

Freshness is the ledger's rule (`Ledger.host_fresh`): a host whose reports stopped is not
fresh, its last figures are shown with their age and left out of every rollup.
"""

import re
from dataclasses import dataclass

from trnwatch.ledger.findings import HbmTrend, hbm_trend, trend_at_s
from trnwatch.ledger.hosts import ChipState, HostState, RuntimeState
from trnwatch.ledger.job import JobDiagnosis, JobLedger
from trnwatch.ledger.job_summary import JobSection
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.rollups import (
    HBM_HIGH_PCT,
    ChipEcc,
    ClusterRollup,
    Freshness,
    UltraServerRollup,
    freshness_at,
    hbm_fill_pct,
    hbm_high,
    host_ecc,
    per_update,
    source_periods_s,
    suspects_by_ultraserver,
)

# Sort keys and filters of the UltraServer grid and host list, in the order `s` / `f` cycle.
SORTS = ("host", "util", "hbm", "ecc")
FILTERS = ("all", "idle", "ecc", "hbm-high", "not-fresh")
FILTER_HELP = {
    "all": "every host",
    "idle": "hosts with an idle chip (0% utilisation)",
    "ecc": "hosts with a chip that had ECC events",
    "hbm-high": f"hosts with a chip at {HBM_HIGH_PCT:.0f}% HBM or more",
    "not-fresh": "hosts that are stale or lost",
}

# Display names of the per-core HBM categories neuron-monitor reports; others keep their own name.
HBM_CATEGORIES = {
    "tensors": "tensors",
    "constants": "constants",
    "model_code": "model code",
    "model_shared_scratchpad": "scratchpad",
    "runtime_memory": "runtime",
}
NO_GROUP = ""  # the group of hosts not mapped to any UltraServer


# --- chips and hosts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChipCell:
    """One chip as the grid and the host list show it (latest figures)."""

    host_id: str
    index: int
    util_pct: float | None
    hbm_bytes: int | None
    hbm_capacity_bytes: int | None
    ecc_events: int  # ECC events in the window (corrected + uncorrected, mem + sram)
    ecc_uncorrected: int
    ecc_undecided: bool  # a counter whose reading is undecided and whose readings disagree

    @property
    def hbm_pct(self) -> float | None:
        return hbm_fill_pct(self.hbm_bytes, self.hbm_capacity_bytes)


@dataclass(frozen=True)
class HostRow:
    """One host: its number in its group, identity, freshness and chips."""

    number: int  # position in its group by name: a short, stable label
    host_id: str
    name: str | None
    source_id: str
    state: Freshness
    age_s: float | None  # since its last report
    chips: tuple[ChipCell, ...]


def chip_cell(host: HostState, chip: ChipState, ecc: ChipEcc) -> ChipCell:
    return ChipCell(
        host.host_id, chip.index, chip.util_pct, chip.hbm_bytes, chip.hbm_capacity_bytes,
        ecc.events, ecc.uncorrected, ecc.undecided,
    )


def _natural(text: str) -> tuple:
    """Sort key that puts "host-9" before "host-10"."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def host_rows(ledger: Ledger, hosts: list[HostState], now_s: float) -> list[HostRow]:
    """Rows for `hosts`, numbered in natural order of their names (instance name, else stream
    label), so numbers follow the names people use; sorting the grid never renumbers."""
    ordered = sorted(hosts, key=lambda h: (_natural(h.instance_name or h.source_id), h.host_id))
    freshness = freshness_at(ledger, now_s)
    return [
        HostRow(
            number=i, host_id=h.host_id, name=h.instance_name, source_id=h.source_id,
            state=freshness[h.host_id],
            age_s=None if h.last_s is None else max(0.0, now_s - h.last_s),
            chips=tuple(chip_cell(h, c, e) for c, e in zip(h.chips, host_ecc(ledger, h), strict=True)),
        )
        for i, h in enumerate(ordered)
    ]


def _sort_key(sort: str):
    def util(row: HostRow) -> float:
        values = [c.util_pct for c in row.chips if c.util_pct is not None]
        return min(values) if values else 101.0  # no figure sorts after every figure

    def hbm(row: HostRow) -> float:
        values = [c.hbm_pct for c in row.chips if c.hbm_pct is not None]
        return -max(values) if values else 1.0

    def ecc(row: HostRow) -> int:
        return -sum(c.ecc_events for c in row.chips)

    key = {"host": lambda r: 0, "util": util, "hbm": hbm, "ecc": ecc}[sort]
    return lambda row: (key(row), row.number)


def _keep(row: HostRow, filter_: str) -> bool:
    if filter_ == "all":
        return True
    if filter_ == "not-fresh":
        return row.state != "fresh"
    if filter_ == "idle":
        return row.state == "fresh" and any(c.util_pct == 0.0 for c in row.chips)
    if filter_ == "ecc":
        return any(c.ecc_events for c in row.chips)
    if filter_ == "hbm-high":
        return any(hbm_high(c.hbm_pct) for c in row.chips)
    raise ValueError(f"unknown filter {filter_!r}")


def sort_and_filter(rows: list[HostRow], sort: str, filter_: str) -> list[HostRow]:
    return sorted((r for r in rows if _keep(r, filter_)), key=_sort_key(sort))


# --- sources and header ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceLine:
    source_id: str
    kind: str
    state: str  # SourceStats.state
    age_s: float | None
    reports: int
    rejected: int
    last_rejection: str
    error: str | None  # why it ended or why its link is down


@dataclass(frozen=True)
class SourcesModel:
    """Every source's state, so the status line can say how many are connected, stale, lost."""

    sources: tuple[SourceLine, ...]

    def count(self, state: str) -> int:
        return sum(1 for s in self.sources if s.state == state)

    @property
    def rejected(self) -> int:
        return sum(s.rejected for s in self.sources)


def sources_model(ledger: Ledger, now_s: float) -> SourcesModel:
    period_by_source = source_periods_s(ledger)
    lines = []
    for s in sorted(ledger.sources.values(), key=lambda s: s.source_id):
        lines.append(SourceLine(
            s.source_id, s.kind, s.state(now_s, period_by_source.get(s.source_id)),
            None if s.last_s is None else max(0.0, now_s - s.last_s),
            s.reports, sum(s.rejected.values()), s.last_rejection, s.end_error or s.link_error,
        ))
    return SourcesModel(tuple(lines))


# --- UltraServer scope ------------------------------------------------------------------------------


def _hosts_by_group(ledger: Ledger) -> dict[str, list[HostState]]:
    """Hosts by group, groups in order (UltraServer ids, then NO_GROUP); kept until the ledger changes."""
    def compute() -> dict[str, list[HostState]]:
        by_group: dict[str, list[HostState]] = {}
        for host in ledger.hosts.values():
            by_group.setdefault(ledger.ultraserver_of(host) or NO_GROUP, []).append(host)
        return {g: by_group[g] for g in sorted(by_group, key=lambda g: (g == NO_GROUP, g))}
    return per_update(ledger, "hosts-by-group", compute)


def groups(ledger: Ledger) -> list[str]:
    """UltraServer ids in order, then NO_GROUP if some hosts are mapped to none."""
    return list(_hosts_by_group(ledger))


def group_hosts(ledger: Ledger, group: str) -> list[HostState]:
    return list(_hosts_by_group(ledger).get(group, ()))


@dataclass(frozen=True)
class UltraServerModel:
    """One UltraServer (or the unmapped hosts) at once: rollup, host counts, rows to draw."""

    group: str  # UltraServer id, or NO_GROUP
    group_number: int
    group_count: int
    rollup: UltraServerRollup  # figures over fresh hosts, host counts over all of them
    rows: tuple[HostRow, ...]  # sorted and filtered
    sort: str
    filter: str


def ultraserver_model(ledger: Ledger, now_s: float, group: str | None, sort: str = "host",
                      filter_: str = "all") -> UltraServerModel | None:
    """The group to show (`group`, or the first one when it is gone or None); None when no host
    has reported yet."""
    ids = groups(ledger)
    if not ids:
        return None
    if group not in ids:
        group = ids[0]
    hosts = group_hosts(ledger, group)
    rows = host_rows(ledger, hosts, now_s)
    return UltraServerModel(
        group=group, group_number=ids.index(group), group_count=len(ids),
        rollup=ledger.rollup_ultraserver(group, hosts, now_s),
        rows=tuple(sort_and_filter(rows, sort, filter_)), sort=sort, filter=filter_,
    )


# --- cluster scope ------------------------------------------------------------------------------------

# What `s` sorts the cluster's UltraServer rows by (the same keys as the host grid's).
CLUSTER_SORT_HELP = {
    "host": "UltraServer id",
    "util": "lowest mean utilisation",
    "hbm": "fullest HBM",
    "ecc": "most chips with ECC events",
}


@dataclass(frozen=True)
class UltraServerLine:
    """One row of the cluster view: an UltraServer (or the hosts in none) over its fresh hosts."""

    group: str  # UltraServer id, or NO_GROUP
    rollup: UltraServerRollup
    suspect_ranks: tuple[int, ...]  # the job's suspect ranks on its hosts (empty: none, or no job)


@dataclass(frozen=True)
class ClusterModel:
    """Every UltraServer at once: cluster totals over fresh hosts with their boundary, one row
    per UltraServer (and one for hosts in none), and where the job's suspect ranks run."""

    rollup: ClusterRollup
    rows: tuple[UltraServerLine, ...]  # sorted
    diagnosis: JobDiagnosis | None  # None: no job telemetry connected
    suspects_unseen: tuple[int, ...]  # suspect ranks on a host the device telemetry does not show
    sort: str


def _cluster_sort_key(sort: str):
    def util(row: UltraServerLine) -> tuple:
        mean = row.rollup.util_mean_pct
        return (mean is None, mean or 0.0)  # no figure sorts after every figure

    def hbm(row: UltraServerLine) -> tuple:
        fill = row.rollup.hbm_fill_pct
        return (fill is None, -(fill or 0.0))

    def ecc(row: UltraServerLine) -> tuple:
        return (-row.rollup.chips_with_ecc,)

    key = {"host": lambda r: (), "util": util, "hbm": hbm, "ecc": ecc}[sort]
    # Ties in id order, hosts in no UltraServer last: the order `[` `]` step through.
    return lambda row: (key(row), row.group == NO_GROUP, row.group)


def cluster_model(ledger: Ledger, now_s: float, sort: str = "host") -> ClusterModel:
    """The cluster view's figures: `Ledger.rollup_cluster` rows, sorted, with the job's suspect
    ranks placed on their UltraServer when job telemetry is connected."""
    cluster = ledger.rollup_cluster(now_s)
    diagnosis = ledger.job_diagnosis(now_s)
    placed, unseen = suspects_by_ultraserver(ledger, diagnosis)
    rows = [UltraServerLine(r.ultraserver, r, tuple(sorted(placed.get(r.ultraserver, ())))) for r in cluster.rows]
    return ClusterModel(
        rollup=cluster, rows=tuple(sorted(rows, key=_cluster_sort_key(sort))),
        diagnosis=diagnosis, suspects_unseen=tuple(unseen), sort=sort,
    )


# --- host scope ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuntimeLine:
    pid: int | None
    tag: str
    chips: tuple[int, ...]
    cores: tuple[int, ...]
    vcpu_user_pct: float | None
    vcpu_system_pct: float | None
    device_bytes: int | None
    error: str
    group_errors: tuple[tuple[str, str], ...]
    running: bool  # listed in the latest report


@dataclass(frozen=True)
class HostModel:
    row: HostRow
    group: str | None
    instance_type: str | None
    device_type: str | None
    neuroncore_version: str | None
    lnc: int | None
    cores_per_chip: int | None
    vcpu_busy_pct: float | None
    vcpu_count: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    runtimes: tuple[RuntimeLine, ...]
    group_errors: tuple[tuple[str, str], ...]
    anomalies: tuple[tuple[str, int], ...]
    util_history: tuple[tuple[tuple[float, float | None], ...], ...]  # per chip, (t_s, util)
    period_s: float | None  # report period, for history spans
    source_rejected: int  # lines its stream delivered that could not be used
    source_last_rejection: str


def _runtime_line(host: HostState, rt: RuntimeState) -> RuntimeLine:
    per = host.cores_per_chip
    chips = tuple(sorted({c // per for c in rt.cores})) if per else ()
    return RuntimeLine(
        rt.pid, rt.tag, chips, rt.cores, rt.vcpu_user_pct, rt.vcpu_system_pct, rt.device_bytes, rt.error,
        tuple(sorted(rt.group_errors.items())), rt.last_seen_s == host.last_s,
    )


def host_model(ledger: Ledger, now_s: float, host_id: str) -> HostModel | None:
    host = ledger.hosts.get(host_id)
    if host is None:
        return None
    group = ledger.ultraserver_of(host)
    source = ledger.sources.get(host.source_id)
    row = next(r for r in host_rows(ledger, group_hosts(ledger, group or NO_GROUP), now_s) if r.host_id == host_id)
    runtimes = sorted(host.runtimes.values(), key=lambda r: (r.last_seen_s != host.last_s, min(r.cores, default=1 << 30), r.order))
    return HostModel(
        row=row, group=group, instance_type=host.instance_type, device_type=host.device_type,
        neuroncore_version=host.neuroncore_version, lnc=host.lnc, cores_per_chip=host.cores_per_chip,
        vcpu_busy_pct=host.vcpu_busy_pct, vcpu_count=host.vcpu_count,
        memory_used_bytes=host.memory_used_bytes, memory_total_bytes=host.memory_total_bytes,
        runtimes=tuple(_runtime_line(host, r) for r in runtimes),
        group_errors=tuple(sorted(host.group_errors.items())),
        anomalies=tuple(sorted(host.anomalies.items())),
        util_history=tuple(tuple((s.t_s, s.util_pct) for s in c.history) for c in host.chips),
        period_s=host.period_s,
        source_rejected=sum(source.rejected.values()) if source else 0,
        source_last_rejection=source.last_rejection if source else "",
    )


# --- chip scope ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CoreLine:
    index: int  # global on the host
    in_use: bool
    util_pct: float | None  # None when the core is not listed (idle cores are omitted)
    flops: float | None
    physical_util_pct: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class ChipModel:
    host: HostRow
    cell: ChipCell
    util_mean_pct: float | None
    util_max_pct: float | None
    hbm_peak_bytes: int | None
    util_age_s: float | None
    hbm_age_s: float | None
    cores: tuple[CoreLine, ...]
    hbm_by_category: tuple[tuple[str, int], ...]  # display name, bytes; known categories first
    ecc_totals: tuple[tuple[str, int | None], ...]
    ecc_reading: str
    runtimes: tuple[RuntimeLine, ...]  # processes using this chip
    latency_s: tuple[tuple[str, tuple[tuple[str, float], ...]], ...]  # per runtime tag: total latency percentiles
    execution_errors: tuple[tuple[str, int | None], ...]  # summed over the chip's runtimes
    models: tuple[tuple[str, int, int], ...]  # name, loaded copies, running copies
    history: tuple[tuple[float, float | None, int | None], ...]  # t_s, util_pct, hbm_bytes
    period_s: float | None
    hbm_trend: HbmTrend | None  # None: too few recent reports


def _categories(chip: ChipState) -> tuple[tuple[str, int], ...]:
    known = [(label, chip.hbm_by_category_bytes[key]) for key, label in HBM_CATEGORIES.items()
             if key in chip.hbm_by_category_bytes]
    other = sorted((k, v) for k, v in chip.hbm_by_category_bytes.items() if k not in HBM_CATEGORIES)
    return tuple(known + other)


def chip_model(ledger: Ledger, now_s: float, host_id: str, index: int) -> ChipModel | None:
    host = ledger.hosts.get(host_id)
    if host is None or not 0 <= index < len(host.chips):
        return None
    chip = host.chips[index]
    host_m = host_model(ledger, now_s, host_id)
    per = host.cores_per_chip or 0
    cores = []
    for core in range(index * per, (index + 1) * per):
        state = chip.cores.get(core)
        cores.append(CoreLine(
            core, state is not None,
            state.util_pct if state else (0.0 if chip.util_at_s is not None else None),
            state.flops if state else None,
            tuple(sorted(state.physical_util_pct.items())) if state else (),
        ))
    on_chip = [r for r in host_m.runtimes if index in r.chips]
    rt_states = [host.runtimes[(r.pid, r.tag)] for r in on_chip]
    errors: dict[str, int | None] = {}
    for rt in rt_states:
        for name, value in rt.executions.totals().items():
            if name.startswith("error.") or name in ("status.completed_with_err", "status.timed_out"):
                prior = errors.get(name, 0)
                errors[name] = None if value is None or prior is None else prior + value
    models: dict[str, list[int]] = {}
    for rt in rt_states:
        for m in rt.loaded_models:
            if not m.devices or index in m.devices:
                counts = models.setdefault(m.name, [0, 0])
                counts[0] += 1
                counts[1] += 1 if m.is_running else 0
    return ChipModel(
        host=host_m.row, cell=host_m.row.chips[index],
        util_mean_pct=chip.util_mean_pct, util_max_pct=chip.util_max_pct, hbm_peak_bytes=chip.hbm_peak_bytes,
        util_age_s=None if chip.util_at_s is None else max(0.0, now_s - chip.util_at_s),
        hbm_age_s=None if chip.hbm_at_s is None else max(0.0, now_s - chip.hbm_at_s),
        cores=tuple(cores), hbm_by_category=_categories(chip),
        ecc_totals=tuple(sorted(chip.ecc.totals().items())), ecc_reading=chip.ecc.reading,
        runtimes=tuple(on_chip),
        latency_s=tuple((rt.tag, tuple(rt.total_latency_s.items())) for rt in rt_states if rt.total_latency_s),
        execution_errors=tuple(sorted(errors.items())),
        models=tuple((name, c[0], c[1]) for name, c in sorted(models.items())),
        history=tuple((s.t_s, s.util_pct, s.hbm_bytes) for s in chip.history),
        period_s=host.period_s,
        hbm_trend=hbm_trend(chip, trend_at_s(host, now_s)),
    )


# --- job scope ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankLine:
    rank: int
    host: str | None  # as the job names it
    chip: int | None
    core: int | None
    status: str
    dead: bool
    last_step: int | None
    heartbeat_age_s: float | None  # None: this rank sends no heartbeats (passive source)
    region: str | None


@dataclass(frozen=True)
class CollectiveLine:
    op: str
    count: int
    bytes: int
    latency_s: dict[str, float | None]  # p50, p90, p99


@dataclass(frozen=True)
class JobModel:
    """The job as its telemetry tells it; every figure here comes from job events only."""

    diagnosis: JobDiagnosis
    summary: JobSection  # JobLedger.summary(now_s), for the run facts
    ranks: tuple[RankLine, ...]
    collectives: tuple[CollectiveLine, ...]  # empty: no collective timings in the telemetry


def job_model(job: JobLedger, ledger: Ledger, now_s: float) -> JobModel:
    """The job view's figures; the diagnosis is `Ledger.job_diagnosis` (each suspect's chip
    utilisation from the device ledger, fresh hosts only), the join the receipt uses too."""
    dead = set(job.dead_ranks(now_s))  # the job ledger's own rule, not a second copy of it
    ranks = tuple(
        RankLine(
            r.rank, r.host, r.chip, r.core, r.status, r.rank in dead, r.last_step,
            None if r.heartbeat_ts is None else max(0.0, now_s - r.heartbeat_ts), r.region,
        )
        for r in sorted(job.ranks.values(), key=lambda r: r.rank)
    )
    summary = job.summary(now_s, lambda host, chip: ledger.chip_util_pct(host, chip, now_s))
    collectives = summary.collectives
    return JobModel(
        diagnosis=JobDiagnosis(summary.verdict, summary.reason, tuple(summary.suspects)),
        summary=summary,
        ranks=ranks,
        collectives=tuple(
            CollectiveLine(op, c.count, c.bytes, c.latency_s.model_dump()) for op, c in collectives.items()
        ) if isinstance(collectives, dict) else (),
    )


def resolve_target(ledger: Ledger, group: str | None, text: str) -> tuple[str, int | None] | None:
    """The (host id, chip or None) that `text` names: "7" or "7/2" (host number in `group`), or a
    host id, instance name or stream label, optionally followed by "/chip". None if nothing matches."""
    name, slash, chip_text = text.strip().partition("/")
    name = name.strip()
    chip = None
    if slash:
        if not chip_text.strip().isdigit():
            return None
        chip = int(chip_text)
    if name.isdigit():
        rows = host_rows(ledger, group_hosts(ledger, group if group is not None else NO_GROUP), 0.0)
        host_id = next((r.host_id for r in rows if r.number == int(name)), None)
    else:
        host = ledger.host_named(name)
        host_id = host.host_id if host else None
    if host_id is None or (chip is not None and not 0 <= chip < len(ledger.hosts[host_id].chips)):
        return None
    return host_id, chip
