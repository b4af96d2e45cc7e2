"""Findings: what is wrong now and where, ordered most severe first, for every view and output.

One list, derived from the ledger at "now": the job's verdict with its suspect ranks (the
job-device join, `Ledger.job_diagnosis`), chips with uncorrected ECC errors, chips whose HBM
leaks, hosts lost or stale, sources that ended with an error and show no host (a neuron-monitor
that never started, a job log that cannot be read), sources whose lines are rejected. Each finding has a severity, the
scope it is about, and its site (UltraServer, host, chip, core, rank, region: whatever is
known), so the screen's fault line, `trnwatch snapshot` and the receipt's headline say the same
thing, culprit first.

HBM trend (per chip, from its history): the median of its report-to-report growth rates over the
last `HBM_TREND_WINDOW_S` of its host's reports (up to "now" when that is earlier) (a burst such as the
job's warm-up does not set it), and the time to full at that rate. A chip *leaks* when, over that window,
its HBM rose at least `LEAK_MIN_BYTES_PER_S` (and as fast over its newest
`HBM_TREND_MIN_SAMPLES` reports: it is still rising), in at least `LEAK_RISING_SHARE` of its
report intervals (steadily, not one allocation), faster than `LEAK_PEER_FACTOR` times its peers'
median rate (the whole job allocating, as in warmup, is no leak), while the job is steady (not
compiling or warming up, when job telemetry says so). The window figures (this trend, and the
outlier rule's mean utilisation) are read from running values each chip's history keeps as it
grows (ledger/chip_history.py), so judging reads a few numbers a chip, never walks its samples.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from statistics import median
from typing import TYPE_CHECKING, Literal, TypeGuard

from trnwatch.collectors.kernel_log import remote_host_label
from trnwatch.collectors.rank_process_records import HELD_STATES
from trnwatch.ledger.chip_history import HBM_TREND_MIN_SAMPLES, UTIL_WINDOW_S, HbmSteps
from trnwatch.ledger.hosts import ChipState, HostState
from trnwatch.ledger.job import JobDiagnosis
from trnwatch.ledger.lag import INTAKE, behind_words
from trnwatch.ledger.rollups import ChipEcc, Freshness, Kept, host_ecc

if TYPE_CHECKING:
    from trnwatch.ledger.ledger import Ledger

Severity = Literal["critical", "error", "warning"]
SEVERITIES: tuple[Severity, ...] = ("critical", "error", "warning")  # most severe first

LEAK_MIN_BYTES_PER_S = float(1 << 20)  # 1 MiB/s: 3.5 GiB an hour
LEAK_RISING_SHARE = 0.75
LEAK_PEER_FACTOR = 4.0
# Job verdicts that are findings, by severity; the others (steady, starting, compiling, finished, ...) are not.
JOB_SEVERITY: dict[str, Severity] = {
    "failed": "critical",
    "aborted": "critical",
    "dead": "critical",
    "stalled": "critical",
    "late": "critical",
    "hung": "critical",
    "slow": "error",
}
NOT_STEADY_VERDICTS = ("starting", "compiling", "no-data")  # start-up allocates on every chip; a checkpoint does not
# A host's EFA errors (drops, retransmits, timeouts, unresponsive / impaired peers; ledger/sysfs_host.py)
# stand out at this many per second and this many times its peers' median (with at least
# EFA_MIN_PEERS other hosts reporting them).
EFA_ERRORS_MIN_PER_S = 1.0
EFA_OUTLIER_FACTOR = 4.0
EFA_MIN_PEERS = 2
# Device-only findings (no job telemetry needed). A burst: at least ECC_BURST_EVENTS corrected ECC
# events on one chip within ECC_BURST_WINDOW_S. An outlier: a chip whose mean utilisation over
# OUTLIER_WINDOW_S stands OUTLIER_FINDING_PCT points or more from the median of its peers: the fresh
# chips of its UltraServer (of its host when it is in none), at least OUTLIER_MIN_CHIPS of them
# (UltraServers may run different jobs; one UltraServer runs one). Judged only without job
# telemetry, whose own verdict (SLOW names the straggler's rank and chip) is the better answer.
ECC_BURST_EVENTS = 10
ECC_BURST_WINDOW_S = 10.0
OUTLIER_WINDOW_S = UTIL_WINDOW_S
OUTLIER_FINDING_PCT = 30.0
OUTLIER_MIN_CHIPS = 4


# --- HBM trends ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HbmTrend:
    """A chip's HBM growth over its recent history."""

    rate_bytes_per_s: float  # median report-to-report rate; negative when it shrinks
    window_s: float  # span of the samples used
    samples: int
    rising_share: float  # share of report intervals in which HBM grew
    time_to_full_s: float | None  # at this rate; None when not growing or capacity unknown


def hbm_trend(chip: ChipState, now_s: float) -> HbmTrend | None:
    """The chip's HBM trend over the HBM_TREND_WINDOW_S up to `now_s`; None with too few samples.
    The median of report-to-report rates, not a least-squares slope: one burst (the job's warm-up
    allocating, a checkpoint buffer) in the window must not set the rate."""
    steps = chip.history.hbm_steps(now_s)
    return None if steps is None else _trend(chip, steps)


def _trend(chip: ChipState, steps: HbmSteps) -> HbmTrend:
    rate = steps.rate_bytes_per_s
    to_full = None
    if rate > 0 and chip.hbm_capacity_bytes:
        to_full = max(0.0, (chip.hbm_capacity_bytes - steps.latest_bytes) / rate)
    return HbmTrend(rate, steps.window_s, steps.samples, steps.rising_share, to_full)


def _rose_lately(chip: ChipState, now_s: float) -> bool:
    """Whether HBM rose at least LEAK_MIN_BYTES_PER_S over the newest HBM_TREND_MIN_SAMPLES
    reports: the leak rule's "still rising"."""
    growth = chip.history.hbm_growth_per_s(HBM_TREND_MIN_SAMPLES, now_s)
    return growth is not None and growth >= LEAK_MIN_BYTES_PER_S


def trend_at_s(host: HostState, now_s: float) -> float:
    """Where a chip's HBM trend window ends: its host's latest report (`now_s` when earlier), so
    the trend changes with reports only and is computed once per report."""
    return now_s if host.last_s is None else min(now_s, host.last_s)


def _rising_trends(kept: Kept, host: HostState, now_s: float) -> tuple[HbmTrend | None, ...]:
    """Per chip of `host`: its HBM trend when it rose lately (`_rose_lately`), else None."""
    at_s = trend_at_s(host, now_s)

    def rising(chip: ChipState) -> HbmTrend | None:
        steps = chip.history.hbm_steps(at_s)  # None with too few samples: no trend, risen or not
        return None if steps is None or not _rose_lately(chip, at_s) else _trend(chip, steps)

    return kept.per_host_report(host, "hbm-rising", lambda h: tuple(rising(c) for c in h.chips), at_s)


def _uncorrected(kept: Kept, host: HostState) -> tuple[tuple[int, ChipEcc], ...]:
    """(chip index, ECC) of the host's chips with uncorrected errors (computed once per report)."""
    return kept.per_host_report(
        host,
        "ecc-uncorrected",
        lambda h: (
            tuple((c.index, e) for c, e in zip(h.chips, host_ecc(kept, h), strict=True) if e.uncorrected)
            if h.figures.ecc_seen  # no chip's ECC counters ever read non-zero: none to read
            else ()
        ),
    )


def _window_utils(kept: Kept, host: HostState, now_s: float) -> tuple[float | None, ...]:
    """Per chip of `host`: its mean utilisation over the OUTLIER_WINDOW_S up to its host's latest
    report (None without a figure there); computed once per report."""
    at_s = trend_at_s(host, now_s)
    return kept.per_host_report(
        host, "util-window", lambda h: tuple(c.history.util_mean_pct(at_s) for c in h.chips), at_s
    )


def corrected_ecc_burst(chip: ChipState, now_s: float) -> int:
    """Corrected ECC events on `chip` within the ECC_BURST_WINDOW_S up to `now_s` (from the
    running totals its reports left, `ChipState.ecc_corrected_marks`)."""
    marks = chip.ecc_corrected_marks
    if not marks:
        return 0
    newest = next((total for t_s, total in reversed(marks) if t_s <= now_s), None)
    if newest is None:
        return 0
    # The total at the window's start: the newest mark at least a window old; without one, 0 (the
    # first mark is the first report with a non-zero counter) unless older marks were dropped.
    before = next((total for t_s, total in reversed(marks) if now_s - t_s >= ECC_BURST_WINDOW_S), None)
    if before is None:
        before = 0 if len(marks) < (marks.maxlen or 0) else marks[0][1]
    return max(0, newest - before)


def _leaking(trend: HbmTrend | None, peer_rate_bytes_per_s: float) -> TypeGuard[HbmTrend]:
    return (
        trend is not None
        and trend.rate_bytes_per_s >= LEAK_MIN_BYTES_PER_S
        and trend.rising_share >= LEAK_RISING_SHARE
        and trend.rate_bytes_per_s > LEAK_PEER_FACTOR * max(0.0, peer_rate_bytes_per_s)
    )


# --- findings ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Site:
    """Where a finding points: as much of UltraServer, host, chip, core, rank and region as is known."""

    host_id: str | None = None  # the ledger's host (None: not a host the device telemetry shows)
    host: str | None = None  # as people name it: instance name, stream label, or the job's hostname
    ultraserver: str | None = None
    chip: int | None = None
    core: int | None = None
    rank: int | None = None
    pid: int | None = None  # the rank's process (this host's rank-process pass, else its run_start)
    region: str | None = None
    step: int | None = None
    source_id: str | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    kind: str  # one of KIND_ORDER
    scope: Literal["job", "chip", "host", "source"]
    label: str  # the first word on the fault line: STALLED, LATE, ECC, LEAK, LOST, ...
    site: Site
    what: str  # the rest of the story, for people ("143 ranks in collective:all_reduce")
    short: str  # the same, shorter, for a narrow screen
    trend: HbmTrend | None = None  # hbm-leak only


def _host_name(host: HostState) -> str:
    return host.instance_name or host.source_id


def _site_of_host(ledger: "Ledger", host: HostState, **more) -> Site:
    return Site(host_id=host.host_id, host=_host_name(host), ultraserver=ledger.ultraserver_of(host), **more)


def _peers_text(ledger: "Ledger", diagnosis: JobDiagnosis) -> tuple[str, str]:
    """Where the other running ranks are ("143 ranks in collective:all_reduce"), long and short."""
    job = ledger.job
    suspects = {s.rank for s in diagnosis.suspects}
    regions: dict[str, int] = {}
    for rank in job.ranks.values() if job else ():
        if rank.rank not in suspects and rank.status == "running" and rank.region:
            regions[rank.region] = regions.get(rank.region, 0) + 1
    if not regions:
        return diagnosis.reason, ""
    region, count = max(regions.items(), key=lambda kv: (kv[1], kv[0]))
    return f"{count} ranks in {region}", f"{count} in {region}"


def _job_finding(ledger: "Ledger", diagnosis: JobDiagnosis | None) -> Finding | None:
    if diagnosis is None or diagnosis.verdict not in JOB_SEVERITY:
        return None
    severity = JOB_SEVERITY[diagnosis.verdict]
    label = diagnosis.verdict.upper()
    if not diagnosis.suspects:  # passive logs name no rank: the age of the silence is the story's core
        idle = "" if diagnosis.idle_s is None else f"no progress for {diagnosis.idle_s:.0f} s"
        return Finding(severity, "job", "job", label, Site(), diagnosis.reason, idle)
    suspect = diagnosis.suspects[0]
    host = ledger.host_named(suspect.host) if suspect.host else None
    site = Site(
        host_id=host.host_id if host else None,
        host=_host_name(host) if host else suspect.host,
        ultraserver=ledger.ultraserver_of(host) if host else None,
        chip=suspect.chip,
        core=suspect.core,
        rank=suspect.rank,
        pid=suspect.pid,
        region=suspect.region,
        step=suspect.step,
    )
    held = suspect.process_state in HELD_STATES
    if diagnosis.verdict == "slow":
        evidence = suspect.evidence
        what = evidence.why
        if evidence.chip_util_pct is not None and evidence.peer_chip_util_median_pct is not None:
            what += f"; chip {evidence.chip_util_pct:.0f}% busy, peers {evidence.peer_chip_util_median_pct:.0f}%"
        short = evidence.why
    else:
        what, short = _peers_text(ledger, diagnosis)
    if held:  # its process cannot run: that is the cause, the peers' place the consequence
        what = what if what == diagnosis.reason else f"{suspect.evidence.why}; {what}"  # the reason says it
        short = suspect.evidence.why
    more = len(diagnosis.suspects) - 1
    if more:
        what += f" (+{more} more suspect rank{'s' if more > 1 else ''})"
    return Finding(severity, "job", "job", label, site, what, short)


@dataclass(slots=True)
class Context:
    """What every rule reads: the ledger and the read model's figures at "now" (ledger/read_model.py)."""

    ledger: "Ledger"
    now_s: float
    diagnosis: JobDiagnosis | None
    freshness: Mapping[str, Freshness]
    kept: Kept  # figures kept per host report
    # Sources trnwatch is behind on, by seconds (ReadModel.behind; ledger/lag.py).
    behind: Mapping[str, float] = field(default_factory=dict)

    def fresh_hosts(self) -> Iterable[HostState]:
        return (h for h in self.ledger.hosts.values() if self.freshness[h.host_id] == "fresh")


@dataclass(frozen=True, slots=True)
class Rule:
    """One kind of finding: its kind, usual severity, title for people, and the check that finds
    every current instance at its site. `RULES` is the registry: its order is the order among
    findings of one severity, so a rule cannot be forgotten by a table."""

    kind: str
    severity: Severity  # the usual one (a job finding's follows its verdict: JOB_SEVERITY)
    title: str  # "uncorrected ECC", for headlines and alerts
    check: Callable[[Context], Iterable[Finding]]


def _job_rule(ctx: Context) -> Iterable[Finding]:
    job = _job_finding(ctx.ledger, ctx.diagnosis)
    return () if job is None else (job,)


def _silent_hosts(ctx: Context, state: str) -> Iterable[Finding]:
    ledger, now_s = ctx.ledger, ctx.now_s
    for host in ledger.hosts.values():
        if ctx.freshness[host.host_id] != state:
            continue
        site = _site_of_host(ledger, host)
        if state == "lost":
            source = ledger.sources.get(host.source_id)
            error = (source.end_error or source.link_error or "") if source else ""
            age = "" if host.last_s is None else f"last report {now_s - host.last_s:.0f} s ago"
            yield Finding("error", "host-lost", "host", "LOST", site, "; ".join(p for p in (age, error) if p), age)
        else:
            age = "no report yet" if host.last_s is None else f"last report {now_s - host.last_s:.0f} s ago"
            yield Finding("error", "host-stale", "host", "STALE", site, age, "")


def _hardware_error_rule(ctx: Context) -> Iterable[Finding]:
    """One critical finding per distinct kernel-log hardware error (ledger/hardware.py), on its
    host and chip (nd-id); it stays for the session (a hardware error does not heal). The line's
    nc-id is said as the line numbers it: whether it counts within the device or on the host is
    not documented, so it is not put in the site's core (the host-global logical core)."""
    ledger = ctx.ledger
    for first, _last, lines in ledger.kernel.faults():
        e = first.error
        host = ledger.host_of_hardware_error(first)
        label = remote_host_label(first.source_id)
        if host is not None:
            site = _site_of_host(ledger, host, chip=e.device)
        elif label is not None and ledger.stream_connecting(label):
            continue  # read over SSH before its host's first report: one incident, on that host, once it reports
        else:
            site = Site(host=label or e.hostname or e.instance_id, chip=e.device, source_id=first.source_id)
        what = f"NEURON_HW_ERR={e.error_type}" + ("" if e.core is None else f" nc-id {e.core}")
        what += f", action {e.action}" if e.action else ""
        if lines > 1:
            what += f" ({lines} lines)"
        yield Finding("critical", "hw-error", "chip", "HWERR", site, what + " in the kernel log", e.error_type)


def _sysfs_site(ctx: Context, key: str) -> Site:
    host = ctx.ledger.hosts.get(key)
    return _site_of_host(ctx.ledger, host) if host else Site(host=key, source_id=ctx.ledger.sysfs[key].source_id)


def _device_unhealthy_rule(ctx: Context) -> Iterable[Finding]:
    """Devices whose sysfs `unhealthy_components` is not empty."""
    for key, sysfs in ctx.ledger.sysfs.items():
        for device, components in sysfs.unhealthy_devices():
            what = f"unhealthy_components: {components} (sysfs)"
            site = replace(_sysfs_site(ctx, key), chip=device)
            yield Finding("error", "device-unhealthy", "chip", "UNHEALTHY", site, what, components)


def _efa_errors_rule(ctx: Context) -> Iterable[Finding]:
    """Hosts whose EFA error rate stands out from their peers' (EFA_* above)."""
    rates = {key: h.efa_error_rate_per_s for key, h in ctx.ledger.sysfs.items()}
    known = {key: rate for key, rate in rates.items() if rate is not None}
    for key, rate in known.items():
        peers = [r for k, r in known.items() if k != key]
        if len(peers) < EFA_MIN_PEERS or rate < EFA_ERRORS_MIN_PER_S:
            continue
        peer_median = median(peers)
        if rate > EFA_OUTLIER_FACTOR * peer_median:
            what = f"EFA errors {rate:.0f}/s (drops, retransmits, timeouts, peer events), peers' median {peer_median:.0f}/s"
            yield Finding("error", "efa-errors", "host", "EFA", _sysfs_site(ctx, key), what, f"{rate:.0f} errors/s")


def _ecc_uncorrected_rule(ctx: Context) -> Iterable[Finding]:
    for host in ctx.fresh_hosts():
        for index, ecc in _uncorrected(ctx.kept, host):
            what = f"{ecc.uncorrected} uncorrected ECC error{'s' if ecc.uncorrected > 1 else ''}"
            site = _site_of_host(ctx.ledger, host, chip=index)
            more = f", {ecc.corrected} corrected" if ecc.corrected else ""
            yield Finding("critical", "ecc-uncorrected", "chip", "ECC", site, what + more, what)


def _hbm_leak_rule(ctx: Context) -> Iterable[Finding]:
    if ctx.diagnosis is not None and ctx.diagnosis.verdict in NOT_STEADY_VERDICTS:
        return
    rising: list[tuple[HostState, int, HbmTrend]] = []  # chips whose HBM rose lately, with their trend
    flat = 0  # the other chips of fresh hosts: flat (rate 0) among the peers
    for host in ctx.fresh_hosts():
        trends = _rising_trends(ctx.kept, host, ctx.now_s)
        flat += len(trends)
        for chip, trend in zip(host.chips, trends, strict=True):
            if trend is not None:
                rising.append((host, chip.index, trend))
                flat -= 1
    peer_rate = median([0.0] * flat + [t.rate_bytes_per_s for _, _, t in rising]) if rising else 0.0
    for host, index, trend in rising:
        if _leaking(trend, peer_rate):
            site = _site_of_host(ctx.ledger, host, chip=index)
            what, short = f"HBM {trend_text(trend)}", f"HBM +{_mib(trend.rate_bytes_per_s)}/s"
            yield Finding("error", "hbm-leak", "chip", "LEAK", site, what, short, trend)


def _ecc_corrected_burst_rule(ctx: Context) -> Iterable[Finding]:
    for host in ctx.fresh_hosts():
        if not host.figures.ecc_seen:
            continue
        for chip in host.chips:
            burst = corrected_ecc_burst(chip, ctx.now_s)
            if burst >= ECC_BURST_EVENTS:
                what = f"{burst} corrected ECC events in {ECC_BURST_WINDOW_S:.0f} s"
                site = _site_of_host(ctx.ledger, host, chip=chip.index)
                yield Finding("warning", "ecc-corrected-burst", "chip", "ECC-BURST", site, what, f"{burst} corrected")


def _util_outlier_rule(ctx: Context) -> Iterable[Finding]:
    if ctx.ledger.job is not None:
        return  # with job telemetry the job's own answer (SLOW, LATE) names the rank and its chip
    groups: dict[tuple[str, str], list[tuple[HostState, int, float]]] = {}
    for host in ctx.fresh_hosts():
        us = ctx.ledger.ultraserver_of(host)
        group = groups.setdefault(("UltraServer", us) if us else ("host", host.host_id), [])
        group.extend(
            (host, index, util)
            for index, util in enumerate(_window_utils(ctx.kept, host, ctx.now_s))
            if util is not None
        )
    for (scope, _), chips in groups.items():
        if len(chips) < OUTLIER_MIN_CHIPS:
            continue
        peers_pct = median(u for _, _, u in chips)
        for host, index, util in chips:
            if abs(util - peers_pct) >= OUTLIER_FINDING_PCT:
                side = "busier" if util > peers_pct else "less busy"
                what = (
                    f"{util:.0f}% busy over {OUTLIER_WINDOW_S:.0f} s, {abs(util - peers_pct):.0f} points {side} "
                    f"than the median of its {scope}'s {len(chips)} chips ({peers_pct:.0f}%)"
                )
                site = _site_of_host(ctx.ledger, host, chip=index)
                short = f"{util:.0f}% vs {peers_pct:.0f}%"
                yield Finding("warning", "util-outlier", "chip", "OUTLIER", site, what, short)


def _source_lost_rule(ctx: Context) -> Iterable[Finding]:
    """A source that ended with an error and shows no host (it never reported, or it is a job's
    source): its error is the finding (a host's is told by its host-lost finding)."""
    on_hosts = {host.source_id for host in ctx.ledger.hosts.values()}
    for source in ctx.ledger.sources.values():
        if source.end_error and source.source_id not in on_hosts:
            yield Finding(
                "error", "source-lost", "source", "LOST", Site(source_id=source.source_id), source.end_error, ""
            )


def _monitor_behind_rule(ctx: Context) -> Iterable[Finding]:
    """trnwatch itself is behind on a source: its own finding, never the job's nor a host's (they
    are judged only on what was read: ledger/lag.py)."""
    pauses = ctx.ledger.lag
    for source_id, behind_s in ctx.behind.items():
        if source_id == INTAKE:
            why = f" (its event loop paused {pauses.longest_pause_s:.0f} s)" if pauses.pauses else ""
        else:
            follower = pauses.followers[source_id]
            waiting = follower.waiting_bytes
            why = f" ({waiting:,} bytes waiting in {follower.waiting_files} files)" if waiting else ""
        what = behind_words(source_id, behind_s) + why
        yield Finding(
            "warning", "monitor", "source", "BEHIND", Site(source_id=source_id), what, f"{behind_s:.0f} s behind"
        )


def _rejected_input_rule(ctx: Context) -> Iterable[Finding]:
    for source in ctx.ledger.sources.values():
        rejected = sum(source.rejected.values())
        if rejected:
            what = f"{rejected} line{'s' if rejected > 1 else ''}: {source.last_rejection}"
            site = Site(source_id=source.source_id)
            yield Finding("warning", "rejected-input", "source", "REJECTED", site, what, f"{rejected} lines")


# The registry. Among findings of one severity: the job's own answer first, then the device's.
RULES: tuple[Rule, ...] = (
    Rule("job", "critical", "job", _job_rule),
    Rule("hw-error", "critical", "hardware error", _hardware_error_rule),
    Rule("ecc-uncorrected", "critical", "uncorrected ECC", _ecc_uncorrected_rule),
    Rule("host-lost", "error", "host lost", lambda ctx: _silent_hosts(ctx, "lost")),
    Rule("source-lost", "error", "source lost", _source_lost_rule),
    Rule("device-unhealthy", "error", "unhealthy device", _device_unhealthy_rule),
    Rule("efa-errors", "error", "EFA errors", _efa_errors_rule),
    Rule("hbm-leak", "error", "HBM leak", _hbm_leak_rule),
    Rule("host-stale", "error", "host stale", lambda ctx: _silent_hosts(ctx, "stale")),
    Rule("ecc-corrected-burst", "warning", "corrected ECC burst", _ecc_corrected_burst_rule),
    Rule("util-outlier", "warning", "utilisation outlier", _util_outlier_rule),
    Rule("monitor", "warning", "trnwatch behind", _monitor_behind_rule),
    Rule("rejected-input", "warning", "rejected input", _rejected_input_rule),
)
KIND_ORDER = tuple(rule.kind for rule in RULES)
RULE_OF = {rule.kind: rule for rule in RULES}


def kind_title(f: Finding) -> str:
    """The finding's kind for people: "uncorrected ECC"; a job finding's says its verdict ("job stalled")."""
    return f"job {f.label.lower()}" if f.kind == "job" else RULE_OF[f.kind].title


def current_findings(ctx: Context) -> list[Finding]:
    """Every current finding of every rule, most severe first (then by kind, UltraServer, host,
    chip). Read them as `Ledger.read(now_s).findings`."""
    return sorted((f for rule in RULES for f in rule.check(ctx)), key=finding_order)


def finding_order(f: Finding) -> tuple:
    """The sort key of findings: severity, kind (the registry's order), then the site."""
    s = f.site
    return (
        SEVERITIES.index(f.severity),
        KIND_ORDER.index(f.kind),
        s.ultraserver or "",
        s.host or "",
        s.chip if s.chip is not None else -1,
        s.rank if s.rank is not None else -1,
        s.source_id or "",
    )


# --- text --------------------------------------------------------------------------------------------


def _mib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.0f} MiB"


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def trend_text(trend: HbmTrend) -> str:
    """ "+64 MiB/s over 30 s, full in 12 min" (or "flat", "-8 MiB/s")."""
    rate = trend.rate_bytes_per_s
    sign = "+" if rate >= 0 else "-"
    text = f"{sign}{_mib(abs(rate))}/s over {trend.window_s:.0f} s"
    if trend.time_to_full_s is not None:
        text += f", full in {_duration(trend.time_to_full_s)}"
    return text


def site_text(site: Site) -> str:
    """The site as the screen names it: "rank 30 sim-us-07/2 core 8 dataloader" (what is known)."""
    parts = []
    if site.rank is not None:
        parts.append(f"rank {site.rank}")
    if site.host:
        parts.append(site.host + ("" if site.chip is None else f"/{site.chip}"))
    elif site.chip is not None:
        parts.append(f"chip {site.chip}")
    elif site.source_id:
        parts.append(site.source_id)
    if site.core is not None:
        parts.append(f"core {site.core}")
    if site.region:
        parts.append(site.region)
    return " ".join(parts)


def finding_text(f: Finding) -> str:
    """One finding as one plain line, culprit first: "LATE rank 30 us-07/2 dataloader · 143 ranks in …"."""
    head = f"{f.label} {site_text(f.site)}".rstrip()
    return f"{head} · {f.what}" if f.what else head


# --- chips to look at first ----------------------------------------------------------------------

# A chip stands out when its utilisation is this many points from its peers' median.
OUTLIER_MIN_PCT = 15.0


@dataclass(frozen=True, slots=True)
class ChipToLook:
    host_id: str
    chip: int
    why: str


def chips_to_look_at(kept: Kept, fresh: list[HostState], findings: tuple[Finding, ...], limit: int) -> list[ChipToLook]:
    """The chips of the `fresh` hosts that most need a look, with why, in the direction the
    findings point: uncorrected ECC first, then the chips the findings name (a suspect rank's
    chip, a leaking chip), then the chips furthest from their peers' median utilisation (the
    busy one when its peers wait: a straggler; an idle one among busy peers). A chip close to
    its peers is not listed: an empty list says nothing stands out."""
    on = {h.host_id for h in fresh}
    picked: dict[tuple[str, int], str] = {}

    def add(host_id: str, chip: int, why: str) -> None:
        if len(picked) < limit and (host_id, chip) not in picked:
            picked[(host_id, chip)] = why

    for host in fresh:
        for chip, ecc in _uncorrected(kept, host):
            add(host.host_id, chip, f"{ecc.uncorrected} uncorrected ECC")
    for f in findings:
        s = f.site
        # (uncorrected ECC came first; an outlier is told below with its figures)
        if s.host_id in on and s.chip is not None and f.kind not in ("ecc-uncorrected", "util-outlier"):
            if f.kind == "hbm-leak" and f.trend is not None:
                add(s.host_id, s.chip, f"HBM {trend_text(f.trend)}")
            elif s.rank is not None:
                add(s.host_id, s.chip, f"{f.label.lower()}: rank {s.rank}" + (f" in {s.region}" if s.region else ""))
            else:
                add(s.host_id, s.chip, f"{f.label.lower()}")
    utils = [(h.host_id, c.index, c.util_pct) for h in fresh for c in h.chips if c.util_pct is not None]
    if len(utils) >= 2:
        peers_pct = median(u for _, _, u in utils)
        for host_id, index, util in sorted(utils, key=lambda x: (-abs(x[2] - peers_pct), x[0], x[1])):
            if abs(util - peers_pct) < OUTLIER_MIN_PCT:
                break
            kind = ("idle" if util == 0.0 else "least busy") if util < peers_pct else "busiest"
            add(host_id, index, f"{kind}: {util:.0f}% while peers' median is {peers_pct:.0f}%")
    return [ChipToLook(h, c, why) for (h, c), why in picked.items()]
