"""The ledger: every line any source delivered, folded into scoped state.

Data flows one way: sources yield `Line`s, collectors/decode.py turns each into typed records,
`Ledger.fold` folds them, views and receipts read the ledger. Nothing here touches a terminal,
a socket or the wall clock: every method that needs "now" takes it, so the same lines give the
same state live and in replay.

Scopes are kept apart by construction: chips live inside hosts, hosts are placed in an
UltraServer only by what a source says (ledger/membership.py: the `--ultraservers` file, a
scheduler, the host's sysfs, its reports, in that order), and every rollup says how many chips
and hosts it covers.
"""

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from trnwatch.collectors.decode import (
    DEVICE_KINDS,
    SESSION_KINDS,
    SOURCE_KIND_OF,
    Decoded,
    DeviceReport,
    Record,
    Rejected,
    decode,
)
from trnwatch.collectors.job_events import PASSIVE_SOURCE_PREFIXES, DecodedJobLine, JobLogStats
from trnwatch.collectors.kernel_log import DriverLine, HardwareError, OtherLine, remote_host_label
from trnwatch.collectors.limits import MAX_HOSTS, MAX_RUNTIMES_TOTAL
from trnwatch.collectors.lines import ClockMark, Line, ReadMark, SourceEvent
from trnwatch.collectors.neuron_monitor import FieldRejection, Report
from trnwatch.collectors.rank_process_records import RankProcessSample
from trnwatch.collectors.scheduler import KubernetesPod, SchedulerJob, header_tags
from trnwatch.collectors.stack_records import StackCapture
from trnwatch.collectors.sysfs_sample import SysfsSample, remote_source_id
from trnwatch.collectors.topology import Origin, TopologyAnswer
from trnwatch.ledger.goodput import GoodputClock
from trnwatch.ledger.hardware import HardwareErrorSeen, KernelLogState
from trnwatch.ledger.hosts import HostState
from trnwatch.ledger.job import JobDiagnosis, JobEventRejected, JobLedger
from trnwatch.ledger.job_summary import JobSection
from trnwatch.ledger.lag import MonitorLag
from trnwatch.ledger.membership import Membership, membership_of
from trnwatch.ledger.pods import PodIndex, pod_index, pods_of
from trnwatch.ledger.rank_processes import RankProcesses
from trnwatch.ledger.read_model import ReadModel
from trnwatch.ledger.rollups import Kept, stale_after_s
from trnwatch.ledger.rules import DEFAULT_RULES, Rules
from trnwatch.ledger.stacks import StackLedger
from trnwatch.ledger.sysfs_host import HostSysfs

Evidence = Literal["live", "replayed", "simulated"]
# connecting / reconnecting / lost-while-retrying come from link events of remote sources (SSH,
# Prometheus); a source without link events goes waiting -> connected / stale -> ended / lost.
SourceState = Literal["waiting", "connecting", "reconnecting", "connected", "stale", "ended", "lost"]


# A device source (neuron-monitor, Prometheus) silent for this many periods (and at least
# LOST_MIN_S) is lost: its host is gone, not late. Its silence counts as a gap from then on.
LOST_PERIODS = 10
LOST_MIN_S = 30.0
# The order a header's worst-source slot reads sources in: the most serious state first.
WORST_STATE_FIRST: tuple[str, ...] = ("lost", "reconnecting", "stale", "connecting", "waiting")
# Sources whose silence says nothing (a kernel log is quiet while all is well): connected until they end.
QUIET_KINDS = ("kernel-log",)


def source_delivered(reports: int, rejected: int, unparsed: int, kind: str, state: str | None) -> bool:
    """Whether a source delivered anything: a line folded, rejected or read unmatched from a job
    log, or a quiet source (a kernel log) connected, whose silence says no kernel error."""
    return bool(reports or rejected or unparsed) or (kind in QUIET_KINDS and state == "connected")


# With MAX_HOSTS hosts kept (reports, or sysfs samples), a new host takes the place of the one
# silent longest, once that one has been silent this long (4 x LOST_MIN_S: lost, and not coming
# back); counted as forgotten.
HOST_FORGET_AFTER_S = 120.0


def longest_lost(table: Mapping[str, HostState | HostSysfs], now_s: float) -> str | None:
    """The key of the host silent longest in `table` if it has been silent HOST_FORGET_AFTER_S or
    more at `now_s` (the one a full table forgets to admit a new host), else None."""
    if not table:
        return None
    key, oldest = min(table.items(), key=lambda item: item[1].last_s if item[1].last_s is not None else float("-inf"))
    if oldest.last_s is not None and now_s - oldest.last_s < HOST_FORGET_AFTER_S:
        return None
    return key


def lost_after_s(period_s: float | None) -> float:
    """How long a device stream may be silent before it (and its host) count as lost."""
    return max(LOST_PERIODS * (period_s or 1.0), LOST_MIN_S)


@dataclass(slots=True)
class SourceStats:
    """What one stream delivered: reports folded, lines rejected (by reason), gaps, its end."""

    source_id: str
    kind: str
    reports: int = 0
    rejected: Counter = field(default_factory=Counter)
    last_rejection: str = ""
    # Values past their bound removed from reports that were kept, by schema field.
    rejected_fields: Counter = field(default_factory=Counter)
    last_field_rejection: str = ""
    first_s: float | None = None
    last_s: float | None = None
    gaps: int = 0
    gap_s: float = 0.0
    ended_s: float | None = None
    end_error: str | None = None
    simulated: bool = False
    # Link of a remote source: None (no link events), "connecting", "up" (a line arrived), "down".
    link: str | None = None
    link_since_s: float | None = None
    link_error: str | None = None  # the last "down" error, kept after recovery
    connects: int = 0
    downs: int = 0
    # A "down" after data: the next report counts a gap however short the outage was.
    interrupted: bool = False
    # Passive job logs: the log profile in use (None: none detected yet) and lines no rule matched.
    log_profile: str | None = None
    unparsed_lines: int = 0
    error_files: dict[str, int] = field(default_factory=dict)  # torchrun @record files: "read", or why not
    # On disk past the exit read when the session ended (a file follower's bound): never folded.
    unread_bytes: int = 0
    unread_lines: int = 0

    def count_rejection(self, reason: str, detail: str) -> None:
        """One more line rejected for `reason`; the detail of the latest is kept for people."""
        self.rejected[reason] += 1
        self.last_rejection = detail[:200]

    def count_field_rejections(self, rejections: tuple[FieldRejection, ...] | list[FieldRejection]) -> None:
        """Values removed from a kept report, each counted under its schema field."""
        for r in rejections:
            self.rejected_fields[r.field] += 1
            self.last_field_rejection = r.detail[:200]

    def state(self, now_s: float, period_s: float | None) -> SourceState:
        if self.ended_s is not None:
            return "lost" if self.end_error else "ended"
        if self.link == "down":
            return "lost"  # with link_error; the source retries (see link_since_s for how long)
        if self.link == "connecting":
            return "reconnecting" if self.downs else "connecting"
        if self.kind in QUIET_KINDS:
            return "connected"
        if self.last_s is None:
            return "waiting"
        if self.silent_lost_s(now_s, period_s):
            return "lost"
        return "stale" if now_s - self.last_s > stale_after_s(period_s) else "connected"

    def silent_lost_s(self, now_s: float, period_s: float | None) -> float:
        """Seconds of ongoing silence of a device stream past the lost threshold counts as a
        gap: its length (from the last line), or 0 when the stream is not lost by silence."""
        if self.kind not in DEVICE_KINDS or self.last_s is None or self.ended_s is not None:
            return 0.0
        silence_s = now_s - self.last_s
        return silence_s if silence_s > lost_after_s(period_s) else 0.0

    def gaps_at(self, now_s: float, period_s: float | None) -> tuple[int, float]:
        """(gaps, gap seconds) including an ongoing silence that made the stream lost."""
        ongoing_s = self.silent_lost_s(now_s, period_s)
        return self.gaps + (1 if ongoing_s else 0), self.gap_s + ongoing_s


class Ledger:
    """All scoped state of one session. Fold decoded lines into it (`fold`, or `ingest` a raw
    line); read hosts, chips and rollups."""

    def __init__(
        self,
        mode: Evidence,
        ultraservers: dict[str, str] | None = None,
        rules: Rules = DEFAULT_RULES,
        scheduler: SchedulerJob | None = None,
    ):
        self.mode: Evidence = mode
        # The scheduler job the session serves (collectors/scheduler.py): read at start, or the
        # recorded session's on a replay; None outside an allocation.
        self.scheduler = scheduler
        self._pods: tuple[SchedulerJob | None, PodIndex] = (None, {})  # the job's pods by node name (`pods_on`)
        # The one rules object (ledger/rules.py), from the command line: the job ledger and the
        # goodput clock judge by it, and the findings read the verdicts they give.
        self.rules = rules
        self.ultraserver_overrides: dict[str, str] = dict(ultraservers or {})
        self.sources: dict[str, SourceStats] = {}
        self.hosts: dict[str, HostState] = {}
        self.hosts_forgotten = 0  # lost hosts dropped to admit new ones (HOST_FORGET_AFTER_S)
        self.sysfs_hosts_forgotten = 0  # the same for the sysfs table
        self._runtimes_kept = 0  # across hosts, at most MAX_RUNTIMES_TOTAL
        self.first_s: float | None = None
        self.last_s: float | None = None
        # The session's clock as marked (collectors/lines.py, ClockMark): the latest tick, and
        # when the session ended (None while it runs, or a recording that was cut short).
        self.clock_s: float | None = None
        self.ended_s: float | None = None
        # Up to when the sources are known read, and the session's pauses (ledger/lag.py): what
        # silence is judged on.
        self.lag = MonitorLag()
        # The job scope, from the first job telemetry line on (None: no job source connected).
        self.job: JobLedger | None = None
        self.goodput: GoodputClock | None = None  # the job window's time accounting, from the first job event
        self.stacks = StackLedger()  # ranks' stack captures (the key, a confirmed stall)
        self.rank_processes = RankProcesses()  # the job's rank processes on this host (psutil passes)
        self.kernel = KernelLogState()  # hardware errors and Neuron driver lines from kernel logs
        # sysfs samples by host id (the sample's instance id, else its source id): device health, EFA rates.
        self.sysfs: dict[str, HostSysfs] = {}
        # Device stream or sysfs source id -> the host id its data went to (a host's kernel log
        # over SSH is placed on the host whose stream or sampler has its label).
        self._stream_hosts: dict[str, str] = {}
        # The latest UltraServer membership each scheduler answered (collectors/topology.py).
        self.discovered: dict[Origin, TopologyAnswer] = {}
        # Counts every change (a line, a link event, a source's end): a read model is of one.
        self.generation = 0
        self._read: ReadModel | None = None  # the latest (`read`)

    # --- read -----------------------------------------------------------------------------------

    def read(self, now_s: float) -> ReadModel:
        """Every figure derived from the ledger at `now_s` (ledger/read_model.py): the same
        object for every reader until the ledger changes or "now" moves."""
        read = self._read
        if read is None or read.generation != self.generation or read.now_s != now_s:
            read = self._read = ReadModel(self, now_s, self.generation, read.kept if read else Kept())
        return read

    # --- ingest -------------------------------------------------------------------------------

    def source(self, source_id: str, kind: str) -> SourceStats:
        """The stats of a source, registered on first use (so a silent source still shows)."""
        stats = self.sources.get(source_id)
        if stats is None:
            stats = self.sources[source_id] = SourceStats(source_id, kind)
        return stats

    def ingest(self, line: Line) -> None:
        """Decode one raw line with its kind's decoder (collectors/decode.py) and fold it: for
        callers that need no slicing (tests, benchmarks). The session's intake decodes and
        calls `fold` in slices on the event loop. A bad line is counted against its source, never raised."""
        self.fold(decode(line))

    def fold(self, decoded: Decoded) -> None:
        """Fold the typed records of one line; a rejected one is counted against its source."""
        self.generation += 1
        if decoded.kind in SESSION_KINDS:  # the session's own stack captures, rank-process passes: no source
            for record in decoded.records:
                if isinstance(record, StackCapture):
                    self.stacks.add(record)
                elif isinstance(record, RankProcessSample):
                    self.rank_processes.fold(record)
                elif isinstance(record, Rejected) and decoded.kind == "stack":
                    self.stacks.rejected[record.reason] += 1
                elif isinstance(record, Rejected):
                    self.rank_processes.rejected[record.reason] += 1
            return
        stats = self.source(decoded.source_id, SOURCE_KIND_OF.get(decoded.kind, decoded.kind))
        t = decoded.received_s
        # The session's receive window: earliest and latest, so a clock stepped back never makes it
        # negative (comparisons, not min/max: this runs for every line).
        if self.first_s is None or t < self.first_s:
            self.first_s = t
        if self.last_s is None or t > self.last_s:
            self.last_s = t
        if stats.link is not None and stats.link != "up":
            stats.link, stats.link_since_s = "up", t
        try:
            for record in decoded.records:
                self._fold_record(stats, t, record)
        except Exception as exc:  # noqa: BLE001 - last resort: a defect costs this line, never the source
            stats.count_rejection("internal", f"{type(exc).__name__}: {exc}")

    def _fold_record(self, stats: SourceStats, t: float, record: Record) -> None:
        if isinstance(record, DecodedJobLine):  # first: most lines of a job are its ranks'
            self._fold_job(stats, t, record)
        elif isinstance(record, Rejected):
            stats.count_rejection(record.reason, record.detail)
        elif isinstance(record, DeviceReport):
            if self._fold_report(stats, stats.source_id, t, record.report):
                stats.count_field_rejections(record.rejected_fields)
        elif isinstance(record, HardwareError | DriverLine | OtherLine):
            if stats.first_s is None:
                stats.first_s = t
            stats.last_s = t
            stats.reports += 1
            if not isinstance(record, OtherLine):
                self.kernel.fold(stats.source_id, t, record)
        elif isinstance(record, SysfsSample):
            self._fold_sysfs(stats, t, record)
        elif isinstance(record, TopologyAnswer):
            self.discovered[record.origin] = record
            if stats.first_s is None:
                stats.first_s = t
            stats.last_s = t
            stats.reports += 1
        elif isinstance(record, JobLogStats):
            self._fold_job_log(stats, record)

    def _fold_job(self, stats: SourceStats, t: float, decoded: DecodedJobLine) -> None:
        job = self.job if self.job is not None else JobLedger(self.rules)
        passive = stats.source_id.startswith(PASSIVE_SOURCE_PREFIXES)
        try:
            job.ingest(decoded.event, t, stats.source_id if passive else "job-dir", passive)
        except JobEventRejected as exc:
            stats.count_rejection(exc.reason, str(exc))
            return
        self.job = job
        if self.goodput is None:
            self.goodput = GoodputClock(self.rules)
        if decoded.dropped_fields:
            job.dropped_fields.update(decoded.dropped_fields)
        if stats.first_s is None:
            stats.first_s = t
        stats.last_s = t
        stats.reports += 1
        self.goodput.ingest(decoded.event, passive)

    def carry(self, decoded: Decoded) -> None:
        """Fold a job line from before a replay window as state only (`JobLedger.carry`): where
        ranks run, their last heartbeat, progress and open phases. No source, goodput or window
        figure counts it; a line that cannot be read is left out."""
        self.generation += 1
        for record in decoded.records:
            if isinstance(record, DecodedJobLine):
                job = self.job if self.job is not None else JobLedger(self.rules)
                passive = decoded.source_id.startswith(PASSIVE_SOURCE_PREFIXES)
                try:
                    job.carry(record.event, decoded.received_s, decoded.source_id if passive else "job-dir", passive)
                except JobEventRejected:
                    continue
                self.job = job

    def _fold_sysfs(self, stats: SourceStats, t: float, sample: SysfsSample) -> None:
        key = sample.instance_id or stats.source_id
        host = self.sysfs.get(key)
        if host is None:
            if len(self.sysfs) >= MAX_HOSTS and not self._forget_a_lost_sysfs_host(t):
                stats.count_rejection("too-many-hosts", f"sysfs of {key[:80]!r} beyond the {MAX_HOSTS} kept")
                return
            host = self.sysfs[key] = HostSysfs(key, stats.source_id)
            self._stream_hosts[stats.source_id] = key
        host.fold(sample, t)
        # A leaf that is no regular file (a FIFO, a device) was not read: a value missing from the
        # sample, counted under the leaf's name each time it is met.
        stats.count_field_rejections(
            [
                FieldRejection(f"sysfs {PurePosixPath(path).name}", f"{path}: {why}")
                for path, why in sample.skipped.items()
            ]
        )
        if stats.first_s is None:
            stats.first_s = t
        stats.last_s = t
        stats.reports += 1

    def _fold_job_log(self, stats: SourceStats, counts: JobLogStats) -> None:
        stats.log_profile, stats.unparsed_lines, stats.error_files = counts.profile, counts.unparsed, counts.error_files
        if self.job is None:
            self.job = JobLedger(self.rules)
        self.job.log_profiles[stats.source_id] = counts.profile
        self.job.log_lines[stats.source_id] = (counts.lines, counts.unparsed, counts.note)

    def _fold_report(self, stats: SourceStats, source_id: str, t: float, report: Report) -> bool:
        """Fold one report into its host; False (and counted) when the host cannot be kept."""
        host_id = self.host_id_of(report, source_id)
        host = self.hosts.get(host_id)
        if host is None:
            if len(self.hosts) >= MAX_HOSTS and not self._forget_a_lost_host(t):
                stats.count_rejection("too-many-hosts", f"host {host_id[:80]!r} beyond the {MAX_HOSTS} kept")
                return False
            host = self.hosts[host_id] = HostState(host_id, source_id)
            self._stream_hosts[source_id] = host_id
        if stats.last_s is not None and (stats.interrupted or t - stats.last_s > stale_after_s(host.period_s)):
            stats.gaps += 1
            stats.gap_s += t - stats.last_s
        stats.interrupted = False
        if stats.first_s is None:
            stats.first_s = t
        stats.last_s = t
        runtimes_before = len(host.runtimes)
        host.fold(report, t, MAX_RUNTIMES_TOTAL - self._runtimes_kept)
        self._runtimes_kept += len(host.runtimes) - runtimes_before
        stats.reports += 1  # after the fold: a line whose fold failed is counted once, as `internal`
        stats.simulated = stats.simulated or host.simulated
        return True

    def _forget_a_lost_host(self, now_s: float) -> bool:
        """Make room in a full host table: forget the host silent longest if it has been silent
        HOST_FORGET_AFTER_S (its figures leave the receipt; `hosts_forgotten` counts it)."""
        host_id = longest_lost(self.hosts, now_s)
        if host_id is None:
            return False
        oldest = self.hosts.pop(host_id)
        if self._read is not None:
            self._read.kept.forget(oldest.host_id)
        self._runtimes_kept -= len(oldest.runtimes)
        self.hosts_forgotten += 1
        return True

    def _forget_a_lost_sysfs_host(self, now_s: float) -> bool:
        """Make room in a full sysfs table the same way (`sysfs_hosts_forgotten` counts it)."""
        key = longest_lost(self.sysfs, now_s)
        if key is None:
            return False
        del self.sysfs[key]
        self.sysfs_hosts_forgotten += 1
        return True

    def clock_mark(self, mark: ClockMark) -> None:
        """Note the session's clock: time passed (a tick), or the session's end."""
        self.generation += 1  # the read-through time moves (ledger/lag.py)
        self.clock_s = mark.t_s if self.clock_s is None else max(self.clock_s, mark.t_s)
        if mark.end:
            self.ended_s = mark.t_s
        self.lag.fold_tick(mark)

    def read_mark(self, mark: ReadMark) -> None:
        """Note how far a file follower has read (ledger/lag.py): the job is judged up to there.
        The follower's own source, once registered (it said it was down or reading again: the
        folder unreadable, a descriptor shortage), is heard from at each whole poll: up again."""
        self.generation += 1
        self.lag.fold_mark(mark)
        stats = self.sources.get(mark.source_id)
        if stats is not None:
            if stats.first_s is None:
                stats.first_s = mark.t_s
            stats.last_s = mark.t_s
            if stats.link in ("connecting", "down"):
                stats.link, stats.link_since_s = "up", mark.t_s

    def nothing_delivered(self) -> bool:
        """Whether no source ever delivered anything (`source_delivered`): a session that measured
        nothing (exit status 5; receipt_markdown's headline says so from the receipt's sources)."""
        now_s = self.latest_s()
        return not any(
            source_delivered(
                s.reports,
                sum(s.rejected.values()),
                s.unparsed_lines,
                s.kind,
                None if now_s is None else s.state(now_s, None),
            )
            for s in self.sources.values()
        )

    def latest_s(self) -> float | None:
        """The latest moment the session is known to have reached: its end, else the latest
        line, event or tick (a replay's "now"; the receipt's judgement once the session ended)."""
        times = [t for t in (self.ended_s, self.clock_s, self.last_s) if t is not None]
        return max(times) if times else None

    def link_event(self, event: SourceEvent) -> None:
        """Note a remote source's link change: "connecting" (an attempt starts) or "down" (lost,
        with the error; the source retries under the same id)."""
        self.generation += 1
        stats = self.source(event.source_id, event.kind)
        if event.event == "connecting":
            stats.link = "connecting"
            stats.connects += 1
            if event.error is not None:  # a follower reading again after trouble of trnwatch's own: why
                stats.link_error = event.error
        elif event.event == "down":
            stats.link = "down"
            stats.downs += 1
            stats.link_error = event.error
            stats.interrupted = stats.interrupted or stats.last_s is not None
        stats.link_since_s = event.t_s

    def source_states(self, now_s: float) -> dict[str, SourceState]:
        """Every source's state now, each judged against the report period of the host(s) it feeds."""
        return dict(self.read(now_s).source_states)

    def worst_sources(self, now_s: float) -> list[tuple[SourceStats, SourceState]]:
        """Sources in trouble, worst first: by state (WORST_STATE_FIRST), device streams before
        job files, then the longest silence; sources that are connected or ended are left out."""
        states = self.source_states(now_s)
        troubled = [(self.sources[sid], state) for sid, state in states.items() if state in WORST_STATE_FIRST]
        return sorted(
            troubled,
            key=lambda item: (
                WORST_STATE_FIRST.index(item[1]),
                item[0].kind not in DEVICE_KINDS,
                item[0].last_s if item[0].last_s is not None else float("inf"),
                item[0].source_id,
            ),
        )

    def end_source(
        self,
        source_id: str,
        t_s: float,
        error: str | None = None,
        unread_bytes: int = 0,
        unread_lines: int = 0,
        kind: str = "job",
    ) -> None:
        """Mark a source finished: cleanly (EOF) or lost (with the error it died of), and what
        it left unread on disk at the session's end. A rank file the exit read never reached
        has no line folded yet: it is registered here, so what it left unread is counted."""
        self.generation += 1
        stats = self.sources.get(source_id)
        if stats is None and unread_bytes:
            stats = self.source(source_id, kind)
        if stats is not None and stats.ended_s is None:
            stats.ended_s = t_s
            stats.end_error = error
            stats.unread_bytes, stats.unread_lines = unread_bytes, unread_lines

    @staticmethod
    def host_id_of(report: Report, source_id: str) -> str:
        """The host a device report from `source_id` is folded into: its instance id, else the source's id."""
        info = report.instance_info
        if info is not None and info.instance_id:
            return info.instance_id
        return source_id

    # --- scopes -------------------------------------------------------------------------------

    def host_named(self, name: str) -> HostState | None:
        """The host a job rank names (its hostname): matched against host ids, stream labels and
        instance names, never guessed from a partial match."""
        for host in self.hosts.values():
            if name in (host.host_id, host.source_id, host.instance_name):
                return host
        return None

    def pods_on(self, host: HostState) -> tuple[KubernetesPod, ...]:
        """The Kubernetes job's pods on `host` (`--k8s-job`; ledger/pods.py matches them by their
        node's names); empty outside Kubernetes."""
        if self._pods[0] is not self.scheduler:
            self._pods = (self.scheduler, pod_index(self.scheduler))
        return pods_of(self._pods[1], host)

    def scheduler_tags(self) -> tuple[str, ...]:
        """The scheduler job for the header, longest first ("slurm 4242 pretrain", "slurm 4242"); empty without one."""
        return () if self.scheduler is None else header_tags(self.scheduler)

    def host_of_hardware_error(self, seen: HardwareErrorSeen) -> HostState | None:
        """The host a hardware-error line is from: the host whose kernel log it was read from over
        SSH (the host of the device stream, else of the sysfs sampler, with that label), else the
        host its instance id names (how reports name hosts), else its hostname; None when no
        host of the device telemetry is that machine."""
        label = remote_host_label(seen.source_id)
        if label is not None:
            host_id = self._stream_hosts.get(label) or self._stream_hosts.get(remote_source_id(label))
            if host_id in self.hosts:
                return self.hosts[host_id]
        error = seen.error
        if error.instance_id and error.instance_id in self.hosts:
            return self.hosts[error.instance_id]
        return self.host_named(error.hostname) if error.hostname else None

    def stream_connecting(self, label: str) -> bool:
        """Whether the fan-out host `label`'s device stream or sysfs sampler is on its first way
        in: registered, no line yet, never down, not ended."""
        for source_id in (label, remote_source_id(label)):
            s = self.sources.get(source_id)
            if s is not None and s.last_s is None and not s.downs and s.link != "down" and s.ended_s is None:
                return True
        return False

    def hardware_faults_by_chip(self, host: HostState) -> dict[int, int]:
        """Chip index -> distinct kernel-log hardware errors placed on that chip of `host`."""
        faults: dict[int, int] = {}
        for first, _last, _lines in self.kernel.faults():
            device = first.error.device
            if device is not None and self.host_of_hardware_error(first) is host:
                faults[device] = faults.get(device, 0) + 1
        return faults

    def job_diagnosis(self, now_s: float) -> JobDiagnosis | None:
        """The job verdict with device evidence joined in (rank -> host / chip), or None without job data."""
        return self.read(now_s).diagnosis

    def job_summary(self, now_s: float) -> JobSection | None:
        """The job section (receipt, snapshot) with the same device evidence, or None without job data."""
        return self.read(now_s).job_summary

    def membership(self, host: HostState) -> Membership:
        """UltraServer of a host and which source said so (ledger/membership.py gives the order);
        never guessed from names or indices."""
        return membership_of(host, self.ultraserver_overrides, self.discovered, self.sysfs)

    def ultraserver_of(self, host: HostState) -> str | None:
        return self.membership(host).ultraserver

    def ultraservers(self) -> dict[str, list[HostState]]:
        """Hosts grouped by UltraServer id (hosts without one are left out)."""
        groups: dict[str, list[HostState]] = {}
        for host in self.hosts.values():
            us = self.ultraserver_of(host)
            if us is not None:
                groups.setdefault(us, []).append(host)
        return groups

    @property
    def simulated(self) -> bool:
        """True once any source delivered a report marked by trnwatch's simulator."""
        return any(s.simulated for s in self.sources.values())

    def simulated_source_ids(self) -> list[str]:
        """Sources that delivered a report marked by trnwatch's simulator (the recorder's catalog)."""
        return [s.source_id for s in self.sources.values() if s.simulated]

    def recorded_evidence(self, claimed: Evidence | None) -> Evidence | None:
        """For a replay, what the recorded session's data was: simulated once a replayed source
        carries the simulator's mark, whatever the recording claimed (None: not a replay)."""
        return "simulated" if claimed is not None and self.simulated else claimed

    @property
    def evidence(self) -> Evidence:
        """What the figures are: a live session fed by the simulator (say through a pipe) is
        simulated, whatever the command line claimed; a replay is a replay."""
        if self.mode == "live" and self.simulated:
            return "simulated"
        return self.mode
