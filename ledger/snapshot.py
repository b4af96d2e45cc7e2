"""Snapshot `trnwatch.snapshot/1`: the read model at one moment, every scope, as typed JSON.

A receipt summarises a whole session; a snapshot is what the screen could show right now (latest
figures, freshness, ages), for incident tickets and scripts. It holds every scope whatever is on
screen: sources, UltraServer rollups (fresh hosts only, with their boundary), hosts with their
runtimes, chips with cores, HBM categories and ECC, the current findings and open incidents, and
the job section when job telemetry is connected. It is the read model's serialisation
(`Ledger.read(now_s)`, ledger/read_model.py) at "now": the session clock the figures were judged
at (for a replay, the replay clock); both it and the write time are passed in. `Snapshot` is its
schema (`trnwatch schema snapshot`); `snapshot_json` is the one way to turn it into text.
"""

import json
import time
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trnwatch import __version__
from trnwatch.ledger import units
from trnwatch.ledger.findings import Finding, Severity, finding_text
from trnwatch.ledger.hosts import ChipState, HostState, RuntimeState
from trnwatch.ledger.incidents import Incident
from trnwatch.ledger.job_summary import JobSection
from trnwatch.ledger.ledger import Evidence, Ledger
from trnwatch.ledger.read_model import ReadModel
from trnwatch.ledger.rollups import Freshness, UltraServerRollup, chip_ecc, hbm_fill_pct
from trnwatch.outside import clean, json_safe

SCHEMA: Literal["trnwatch.snapshot/1"] = "trnwatch.snapshot/1"
NO_FINDINGS = "none: no stall, leak, uncorrected ECC, lost or stale host, or rejected input"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FindingEntry(_Section):
    """A current finding (ledger/findings.py): severity, kind, scope, the site's known parts, text."""

    severity: Severity
    kind: str
    scope: str
    label: str
    site: dict[str, str | int]  # the known parts of `Site`: host_id, host, ultraserver, chip, core, rank, ...
    what: str
    text: str  # the finding as one line, culprit first
    hbm_rate_bytes_per_s: float | None = None  # hbm-leak only
    hbm_time_to_full_s: float | None = None  # hbm-leak only; null when not growing or capacity unknown


class SourceEntry(_Section):
    id: str
    kind: str
    state: str
    age_s: float | None
    reports: int
    rejected: int
    rejected_by_reason: dict[str, int]
    last_rejection: str
    end_error: str | None


class Boundary(_Section):
    hosts: int  # with configured members that never reported
    hosts_fresh: int
    chips_in_figures: int


class UltraServerEntry(_Section):
    """An UltraServer's figures over its fresh hosts: UltraServer figures, not a chip's."""

    id: str
    boundary: Boundary
    hbm_used_bytes: int
    hbm_capacity_bytes: int | None
    util_mean_pct: float | None
    util_min_pct: float | None
    chips_idle: int
    chips_with_ecc: int
    chips_with_uncorrected_ecc: int


class Executions(_Section):
    reading: str
    totals: dict[str, int | None]


class LoadedModel(_Section):
    name: str
    model_id: int | str | None
    is_running: bool | None
    devices: list[int]


class RuntimeEntry(_Section):
    pid: int | None
    tag: str
    cores: list[int]
    in_latest_report: bool
    vcpu_user_pct: float | None
    vcpu_system_pct: float | None
    device_bytes: int | None
    host_bytes: int | None
    total_latency_s: dict[str, float]
    device_latency_s: dict[str, float]
    executions: Executions
    loaded_models: list[LoadedModel]
    error: str
    group_errors: dict[str, str]


class HostEntry(_Section):
    host: str
    source: str
    ultraserver: str | None
    fresh: bool  # state == "fresh"
    # The read model's one rule (ReadModel.freshness), as the screen and /metrics say it: fresh,
    # stale (reports stopped) or lost (its source ended with an error or its link is down).
    state: Freshness
    age_s: float | None  # since its last report, when its state was judged
    instance_name: str | None
    instance_type: str | None
    device_type: str | None
    neuroncore_version: str | None
    lnc: int | None
    chips: int
    cores_per_chip: int | None
    period_s: float | None
    vcpu_busy_pct: float | None
    vcpu_count: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    group_errors: dict[str, str]
    anomalies: dict[str, int]
    runtimes: list[RuntimeEntry]


class CoreEntry(_Section):
    util_pct: float
    flops: float | None
    physical_util_pct: dict[str, float]


class ChipEccEntry(_Section):
    reading: str
    totals: dict[str, int | None]
    corrected: int
    uncorrected: int


class ChipEntry(_Section):
    host: str
    device: int
    util_pct: float | None
    util_age_s: float | None
    hbm_bytes: int | None
    hbm_capacity_bytes: int | None
    hbm_age_s: float | None
    hbm_by_category_bytes: dict[str, int]
    cores: dict[str, CoreEntry]  # by the core's index on the host
    util_mean_pct: float | None
    util_max_pct: float | None
    hbm_peak_bytes: int | None
    samples: int
    ecc: ChipEccEntry


class NoJob(_Section):
    connected: Literal[False] = False
    note: str = "no job telemetry connected: no job figures"


class Snapshot(_Section):
    """Every scope of the ledger judged at `now` (unix seconds)."""

    # `schema` is a BaseModel attribute, so the field is `schema_` with the JSON key `schema`.
    schema_: Literal["trnwatch.snapshot/1"] = Field(alias="schema")
    tool: str
    evidence: Evidence
    recorded_evidence: Evidence | None  # for a replay: what the recorded session was
    now: float
    written_at: float
    findings: list[FindingEntry]  # most severe first
    incidents: list[Incident]  # the session's open incidents, most severe first
    sources: list[SourceEntry]
    ultraservers: list[UltraServerEntry]
    hosts: list[HostEntry]
    chips: list[ChipEntry]
    job: JobSection | NoJob

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def snapshot_json_schema() -> dict:
    """JSON Schema of the snapshot, exported from the model."""
    return Snapshot.model_json_schema(by_alias=True)


def session_now_s(ledger: Ledger, wall_s: float, job=None) -> float:
    """The clock figures are judged by: the wall clock for live and simulated sessions; for a
    replay, the latest moment it replayed (a line, an event, a recorded tick of the clock or the
    session's end), never the wall."""
    if ledger.evidence == "replayed":
        latest = [t for t in (ledger.latest_s(), job.last_received_s if job else None) if t is not None]
        return max(latest) if latest else wall_s
    return wall_s


def _r(value: float | None, places: int = 3) -> float | None:
    return None if value is None else round(value, places)


def _age(now_s: float, t_s: float | None) -> float | None:
    return None if t_s is None else _r(max(0.0, now_s - t_s))


def build_snapshot(
    ledger: Ledger,
    now_s: float,
    job: JobSection | None = None,
    recorded_evidence: Evidence | None = None,
    *,
    written_at_s: float,
    incidents: Sequence[Incident] = (),
) -> Snapshot:
    """Every scope of `ledger` judged at `now_s`; `job` is `JobLedger.summary(now_s)` or None
    when no job telemetry is connected (then the section says so instead of holding zeros).
    `written_at_s` is the wall clock when the snapshot is taken; `incidents` the session's open
    incidents (ledger/incidents.py), most severe first."""
    read = ledger.read(now_s)
    hosts = sorted(ledger.hosts.values(), key=lambda h: h.host_id)
    states = read.source_states
    return Snapshot(
        schema_=SCHEMA,
        tool=f"trnwatch {__version__}",
        evidence=ledger.evidence,
        recorded_evidence=recorded_evidence,
        now=now_s,
        written_at=written_at_s,
        findings=[_finding(f) for f in read.findings],
        incidents=list(incidents),
        sources=[
            SourceEntry(
                id=s.source_id,
                kind=s.kind,
                state=states[s.source_id],
                age_s=_age(now_s, s.last_s),
                reports=s.reports,
                rejected=sum(s.rejected.values()),
                rejected_by_reason=dict(sorted(s.rejected.items())),
                last_rejection=s.last_rejection,
                end_error=s.end_error,
            )
            for s in sorted(ledger.sources.values(), key=lambda s: s.source_id)
        ],
        ultraservers=[
            _ultraserver(read.ultraserver(us, members), us) for us, members in sorted(ledger.ultraservers().items())
        ],
        hosts=[_host(ledger, read, h) for h in hosts],
        chips=[_chip(h, c, now_s) for h in hosts for c in h.chips],
        job=job if job is not None else NoJob(),
    )


def _finding(f: Finding) -> FindingEntry:
    site = {k: getattr(f.site, k) for k in f.site.__slots__ if getattr(f.site, k) is not None}
    trend = f.trend
    return FindingEntry(
        severity=f.severity,
        kind=f.kind,
        scope=f.scope,
        label=f.label,
        site=site,
        what=f.what,
        text=finding_text(f),
        hbm_rate_bytes_per_s=None if trend is None else round(trend.rate_bytes_per_s, 1),
        hbm_time_to_full_s=None if trend is None else _r(trend.time_to_full_s, 1),
    )


def _ultraserver(r: UltraServerRollup, us: str) -> UltraServerEntry:
    return UltraServerEntry(
        id=us,
        boundary=Boundary(hosts=r.hosts_total, hosts_fresh=r.hosts_fresh, chips_in_figures=r.chips),
        hbm_used_bytes=r.hbm_used_bytes,
        hbm_capacity_bytes=r.hbm_capacity_bytes,
        util_mean_pct=_r(r.util_mean_pct),
        util_min_pct=_r(r.util_min_pct),
        chips_idle=r.chips_idle,
        chips_with_ecc=r.chips_with_ecc,
        chips_with_uncorrected_ecc=r.chips_with_uncorrected_ecc,
    )


def _host(ledger: Ledger, read: ReadModel, h: HostState) -> HostEntry:
    state = read.freshness[h.host_id]
    age_s = read.host_age_s(h)
    return HostEntry(
        host=h.host_id,
        source=h.source_id,
        ultraserver=ledger.ultraserver_of(h),
        fresh=state == "fresh",
        state=state,
        age_s=None if age_s is None else _r(age_s),
        instance_name=h.instance_name,
        instance_type=h.instance_type,
        device_type=h.device_type,
        neuroncore_version=h.neuroncore_version,
        lnc=h.lnc,
        chips=len(h.chips),
        cores_per_chip=h.cores_per_chip,
        period_s=h.period_s,
        vcpu_busy_pct=_r(h.vcpu_busy_pct),
        vcpu_count=h.vcpu_count,
        memory_used_bytes=h.memory_used_bytes,
        memory_total_bytes=h.memory_total_bytes,
        group_errors=dict(h.group_errors),
        anomalies=dict(h.anomalies),
        runtimes=[_runtime(h, r) for r in sorted(h.runtimes.values(), key=lambda r: r.order)],
    )


def _runtime(h: HostState, r: RuntimeState) -> RuntimeEntry:
    return RuntimeEntry(
        pid=r.pid,
        tag=r.tag,
        cores=list(r.cores),
        in_latest_report=r.last_seen_s == h.last_s,
        vcpu_user_pct=r.vcpu_user_pct,
        vcpu_system_pct=r.vcpu_system_pct,
        device_bytes=r.device_bytes,
        host_bytes=r.host_bytes,
        total_latency_s=r.total_latency_s,
        device_latency_s=r.device_latency_s,
        executions=Executions(reading=r.executions.reading, totals=r.executions.totals()),
        loaded_models=[
            LoadedModel(name=m.name, model_id=m.model_id, is_running=m.is_running, devices=list(m.devices))
            for m in r.loaded_models
        ],
        error=r.error,
        group_errors=dict(r.group_errors),
    )


def _chip(h: HostState, c: ChipState, now_s: float) -> ChipEntry:
    ecc = chip_ecc(c)
    return ChipEntry(
        host=h.host_id,
        device=c.index,
        util_pct=_r(c.util_pct),
        util_age_s=_age(now_s, c.util_at_s),
        hbm_bytes=c.hbm_bytes,
        hbm_capacity_bytes=c.hbm_capacity_bytes,
        hbm_age_s=_age(now_s, c.hbm_at_s),
        hbm_by_category_bytes=dict(c.hbm_by_category_bytes),
        cores={
            str(i): CoreEntry(util_pct=s.util_pct, flops=s.flops, physical_util_pct=dict(s.physical_util_pct))
            for i, s in sorted(c.cores.items())
        },
        util_mean_pct=_r(c.util_mean_pct),
        util_max_pct=_r(c.util_max_pct),
        hbm_peak_bytes=c.hbm_peak_bytes,
        samples=c.samples,
        ecc=ChipEccEntry(
            reading=c.ecc.reading, totals=c.ecc.totals(), corrected=ecc.corrected, uncorrected=ecc.uncorrected
        ),
    )


def snapshot_json(snap: Snapshot) -> str:
    """The snapshot as JSON text: outside strings exact, control and bidi characters escaped."""
    return json_safe(json.dumps(snap.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=False)) + "\n"


# --- plain text ------------------------------------------------------------------------------------


def _gib(n: int | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / 2**40:.2f} TiB" if n >= 2**40 else f"{n / 2**30:.1f} GiB"


def render_text(snap: Snapshot, lowest: int = 5) -> str:
    """The snapshot for a ticket: what it is, each scope with its boundary, what needs a look."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(snap.now))
    replay = f" (recorded session: {snap.recorded_evidence})" if snap.recorded_evidence else ""
    chips, hosts = snap.chips, snap.hosts
    fresh_hosts = {h.host for h in hosts if h.fresh}
    lines = [
        f"trnwatch snapshot ({snap.evidence.upper()}{replay}) at {when}",
        f"coverage: {len(chips)} chips on {len(hosts)} hosts ({len(fresh_hosts)} fresh); "
        f"{len(snap.ultraservers)} UltraServer(s)",
        "",
        "findings (most severe first):",
        *(f"  {clean(f'{f.severity}: {f.text}')}" for f in snap.findings),
        *([] if snap.findings else [f"  {NO_FINDINGS}"]),
        "",
        "open incidents (most severe first; since when, last seen):",
        *(
            f"  #{i.id} {i.severity}: {clean(i.evidence.text)} (since {units.clock(i.first)}, last {units.clock(i.last)})"
            for i in snap.incidents
        ),
        *([] if snap.incidents else ["  none"]),
        "",
        "sources:",
    ]
    states: dict[str, int] = {}
    for s in snap.sources:
        states[s.state] = states.get(s.state, 0) + 1
    lines.append(
        "  "
        + ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        + f"; {sum(s.rejected for s in snap.sources)} rejected lines"
    )
    for s in snap.sources:
        if s.state not in ("connected", "ended") or s.rejected:
            age = "" if s.age_s is None else f", last line {s.age_s:.0f} s ago"
            error = f", error: {clean(s.end_error)}" if s.end_error else ""
            lines.append(f"  {clean(s.id)}: {s.state}{age}, {s.rejected} rejected{error}")
    for us in snap.ultraservers:
        b = us.boundary
        fill_pct = hbm_fill_pct(us.hbm_used_bytes, us.hbm_capacity_bytes)
        share = "" if fill_pct is None else f" ({fill_pct:.1f}%)"
        lines += [
            "",
            f"UltraServer {clean(us.id)} (figures over {b.chips_in_figures} chips on {b.hosts_fresh}/{b.hosts} "
            "fresh hosts; UltraServer figures, not a chip's):",
            f"  HBM {_gib(us.hbm_used_bytes)} of {_gib(us.hbm_capacity_bytes)}{share}; util mean {units.pct(us.util_mean_pct)}, "
            f"min {units.pct(us.util_min_pct)}; idle chips {us.chips_idle}; chips with ECC events {us.chips_with_ecc}",
        ]
    stale = [h for h in hosts if not h.fresh]
    if stale:
        lines += ["", "hosts not fresh (left out of UltraServer figures):"]
        for h in stale:
            last = "never" if h.age_s is None else f"{h.age_s:.0f} s ago"
            lines.append(f"  {clean(h.instance_name or h.host)} ({clean(h.host)}): {h.state}, last report {last}")
    fresh_chips = [c for c in chips if c.host in fresh_hosts and c.util_pct is not None]
    names = {h.host: h.instance_name or h.host for h in hosts}
    if fresh_chips:
        lines += ["", "lowest utilisation (fresh chips, each figure one chip's):"]
        for c in sorted(fresh_chips, key=lambda c: (c.util_pct, c.host, c.device))[:lowest]:
            lines.append(
                f"  {clean(names[c.host])} chip {c.device}: util {units.pct(c.util_pct)}, "
                f"HBM {_gib(c.hbm_bytes)} of {_gib(c.hbm_capacity_bytes)}"
            )
    ecc = [c for c in chips if c.ecc.corrected or c.ecc.uncorrected]
    if ecc:
        lines += ["", "chips with ECC events:"]
        for c in ecc:
            totals = ", ".join(f"{k} {v}" for k, v in sorted(c.ecc.totals.items()) if v)
            lines.append(f"  {clean(names[c.host])} chip {c.device}: {totals} (reading {c.ecc.reading})")
    lines += ["", "job:", *_job_text(snap.job, lowest)]
    return "\n".join(lines) + "\n"


def _job_text(job: JobSection | NoJob, lowest: int) -> list[str]:
    if isinstance(job, NoJob):
        return ["  no job telemetry connected: no step, throughput or collective figures"]
    lines = [f"  run {clean(job.run)}: {job.verdict.upper()} - {clean(job.reason)}"]
    for s in job.suspects[:lowest]:
        chip = "?" if s.chip is None else s.chip
        lines.append(
            f"  suspect rank {s.rank}{'' if s.pid is None else f' (pid {s.pid})'}: host {clean(s.host or '?')} chip {chip} "
            f"core {'?' if s.core is None else s.core}, region {clean(s.region or 'n/a')}, "
            f"step {s.step}: {clean(s.evidence.why)}"
        )
    if len(job.suspects) > lowest:
        lines.append(f"  ... {len(job.suspects) - lowest} more suspect(s) in the JSON")
    r = job.ranks
    lines.append(
        f"  ranks: {r.running} running, {r.finished} finished, {r.failed} failed, {r.dead} dead"
        + (f", {r.unknown} never heard from" if r.unknown else "")
        + f" (world size {r.world_size})"
    )
    t = job.throughput
    if t:
        tokens = "tokens/s n/a" if t.tokens_per_s is None else f"{t.tokens_per_s:,.0f} tokens/s"
        live = job.verdict in ("steady", "slow", "starting", "compiling", "checkpointing", "finished")
        lead = "" if live else "last steady "
        age = "" if live else f", {t.last_step_age_s:.0f} s ago"
        lines.append(
            f"  {lead}{tokens} over steps {t.first_step}-{t.last_step}{age}; step time p50 {t.step_time_s.p50} s"
        )
    return lines
