"""Receipt `trnwatch.receipt/1`: what was measured, at which boundary, from which source.

Built from the ledger (pure: the write time is passed in) and written by the session on every exit
path (trnwatch/output.py) as JSON plus a Markdown rendering (ledger/receipt_markdown.py) and an SVG
timeline (ledger/timeline_svg.py) beside it. Chip, host, UltraServer and job figures live in
separate sections; the `boundary` says what the figures cover, so `trnwatch compare` can refuse a
comparison across boundaries, and the evidence state (live / replayed / simulated) heads every file.
"""

from collections.abc import Mapping, Sequence
from itertools import pairwise
from statistics import median
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trnwatch import __version__
from trnwatch.collectors.scheduler import KubernetesJob, SchedulerJob
from trnwatch.collectors.stack_records import StackCapture
from trnwatch.ledger.boundary import (
    COMPILER_KEYS,
    FRAMEWORK_KEYS,
    hosts_lnc,
    one_value,
    parallel_text,
    version_of,
)
from trnwatch.ledger.counters import Reading
from trnwatch.ledger.goodput import THROUGHPUT_POINTS, Badput, GoodputClock
from trnwatch.ledger.hosts import HISTORY_SAMPLES, HostState
from trnwatch.ledger.incidents import Incident, IncidentLog, with_stacks
from trnwatch.ledger.job import percentile
from trnwatch.ledger.job_summary import JobSection, Percentiles
from trnwatch.ledger.ledger import Evidence, Ledger
from trnwatch.ledger.pods import placed_job
from trnwatch.ledger.read_model import ReadModel
from trnwatch.ledger.rollups import known_sum
from trnwatch.ledger.runtimes import EXECUTION_ERROR_STATUSES
from trnwatch.ledger.sysfs_host import EfaRollup, HostSysfs
from trnwatch.outside import json_safe

SCHEMA = "trnwatch.receipt/1"

ExitReason = Literal["eof", "duration", "interrupt", "sigterm", "sighup", "quit", "terminal-lost", "error", "exit-on"]

# Dense BF16 peak of one chip, from AWS's published chip tables (no Trainium hardware ran here):
# Trainium3 671 TFLOPS (the chip table; 8 x 79 = 632 from the NeuronCore-v4 Tensor Engine figure),
# Trainium2 667 TFLOPS, Trainium 190 TFLOPS. MFU = mean achieved FLOP/s / this peak; absent for
# other device types and for jobs whose precision is not BF16.
PEAK_BF16_FLOPS_PER_CHIP = {"trainium3": 671e12, "trainium2": 667e12, "trainium": 190e12}
PEAK_FLOPS_ASSUMPTION = (
    "dense BF16 peak per chip from AWS's chip tables: trainium3 671 TFLOPS, trainium2 667, "
    "trainium 190; unknown device types and non-BF16 jobs get no MFU"
)
GOODPUT_METHOD = (
    "Timeline rank's events (the lowest rank) attribute every second from the first job event to the "
    "last, plus the silence the monitor saw after it until the session ended, to one bucket: steady "
    "steps are productive (a job with no warmup/steady phase, such as a passive log: steps outside any phase, "
    "less the warm-up inferred as for the steady-state figures); init, warm-up and time before a process's "
    "first step are startup; compile "
    "phases compile; checkpoint phases and blocking saves checkpoint_save; restart from the last event "
    "before a restart to the first step after it, plus the steps redone at the median steady step time; "
    "gaps between steps up to the late threshold data_loading, beyond the stall threshold stalled (the "
    "job verdict's thresholds); the rest unexplained. Modelled on ml-goodput-measurement's badput breakdown."
)
TIMELINE_POINTS = 120

COUNTER_RULE = (
    "Counts of execution_stats (per runtime) and neuron_hw_counters (per chip) are read from "
    "their own series: a decrease proves per-period counts (total = sum); no decrease with a "
    "repeated non-zero value reads as cumulative (total = last - first); otherwise undecided "
    "(total given only where both readings agree, else null; both readings listed)."
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Window(_Section):
    start: float | None  # unix seconds of the first line received
    end: float | None  # unix seconds of the last line received
    seconds: float


class SourceEntry(_Section):
    id: str
    kind: str
    reports: int
    rejected: int
    rejected_by_reason: dict[str, int]
    last_rejection: str
    # Values past their bound removed from reports that were kept (the rest of each report was
    # folded), by schema field; not counted in `rejected`, which counts whole lines.
    rejected_fields: dict[str, int]
    last_field_rejection: str
    gaps: int  # silences longer than the stale threshold
    gap_seconds: float
    ended: bool
    end_error: str | None
    simulated: bool
    # Passive job logs only: the log profile reading it, and lines no rule matched (not errors).
    log_profile: str | None = None
    unparsed_lines: int = 0
    error_files: dict[str, int] = {}  # torchrun `@record` error files it pointed to: "read", or why not
    # Its state at judged_at (connected, stale, lost, ended, connecting, ...), and why it failed:
    # null unless it ended on an error, was lost (down, or silent past the lost threshold), or
    # never delivered a line ("never connected: ...").
    state: str | None = None
    failed: str | None = None
    # A followed file's lines still on disk past the exit read's bound (never folded; 0: read whole).
    unread_at_exit_bytes: int = 0
    unread_at_exit_lines: int = 0


class MonitorEntry(_Section):
    """trnwatch's own lag (ledger/lag.py): how far behind it was on its sources, its pauses, and
    what it left unread at exit. Its own finding, never the job's: ranks and hosts were judged
    only on what was read."""

    # Seconds behind at the end, per source ("intake": the sources that push lines), and the most
    # it was behind during the session, as seen at its ticks.
    behind_at_end_s: dict[str, float]
    worst_behind_s: dict[str, float]
    pauses: int  # times its event loop was not scheduled for a second or more (SIGSTOP, starved machine)
    paused_s: float
    longest_pause_s: float
    held_ticks: int  # seconds the intake's queue was full (sources held back)
    # Lines and bytes left unread at exit, added up over the followed files (each file's: sources[]).
    unread_at_exit_lines: int
    unread_at_exit_bytes: int
    unread_at_exit_sources: int


class HostEntry(_Section):
    host: str
    source: str
    ultraserver: str | None
    # Who placed the host (ledger/membership.py's order); with ultraserver null, "sysfs" means
    # the driver says the host is in no UltraServer, null that no source placed it.
    ultraserver_from: Literal["config", "kubernetes", "sysfs", "slurm", "report"] | None
    ultraserver_detail: str = ""  # e.g. the sysfs node id ("node 2")
    instance_type: str | None
    device_type: str | None
    neuroncore_version: str | None
    lnc: int | None
    chips: int
    cores_per_chip: int | None
    reports: int
    anomalies: dict[str, int]
    group_errors: dict[str, str]
    runtimes_evicted: int  # runtimes dropped after missing for the eviction time (README, input limits)
    # Both names of the host, so rows join: its instance id (null when its reports carry none,
    # `host` being the stream label then) and its name (instance_info.instance_name, the hostname
    # a job's ranks report: suspects[].host).
    instance_id: str | None = None
    name: str | None = None
    pods: list[str] = []  # the Kubernetes job's pods on this host ("namespace/name"; --k8s-job)


class Ecc(_Section):
    mem_corrected: int | None
    mem_uncorrected: int | None
    sram_corrected: int | None
    sram_uncorrected: int | None


class LatencyPercentiles(_Section):
    p50: float | None
    p99: float | None


class ChipEntry(_Section):
    host: str
    device: int
    hbm_capacity_bytes: int | None
    hbm_peak_bytes: int | None
    util_mean_pct: float | None
    util_max_pct: float | None
    samples: int
    # Latest percentiles (s) the chip's runtimes reported (worst runtime if several); null when none did.
    device_latency_s: LatencyPercentiles | None
    flops_mean_per_s: float | None  # mean over the window of the chip's cores' FLOP/s; null when not reported
    peak_flops_per_s: float | None  # assumed peak (PEAK_FLOPS_ASSUMPTION), null when unknown
    mfu_pct: float | None  # flops_mean_per_s / peak_flops_per_s
    # Utilisation samples in which some core's exporter gauge was stale (left over by the vendor
    # exporter, counted as idle): 0 for neuron-monitor streams (ledger/exporter_gauges.py).
    util_stale_samples: int = 0
    ecc: Ecc
    ecc_reading: Reading
    ecc_readings: dict[str, dict[str, int]] | None  # both readings, only where they disagree
    # The host's name (as ranks report it): a suspect's (host, chip) is this chip's (host_name, device).
    host_name: str | None = None


class ExecutionCounts(_Section):
    reading: Reading
    reports: int
    totals: dict[str, int | None]
    readings: dict[str, dict[str, int]] | None  # both readings, only where they disagree


class RuntimeEntry(_Section):
    host: str
    pid: int | None  # null when the source carries no pid (Prometheus)
    tag: str
    cores: list[int]
    executions: ExecutionCounts
    total_latency_s: dict[str, float]  # latest percentiles reported
    loaded_models: list[str]
    group_errors: dict[str, str]


class EfaEntry(_Section):
    """EFA rates of a group of hosts at the window's end (the read model's `efa`, ledger/sysfs_host.py
    `efa_rollup`, the figures the screen shows): the traffic between UltraServers, summed over the
    `hosts` of its `members` whose sysfs gave rates."""

    hosts: int
    tx_bytes_per_s: float | None
    rx_bytes_per_s: float | None
    errors_per_s: float | None  # drops, retransmits, timeouts, unresponsive / impaired peers
    members: int | None = None  # hosts in the group (null in receipts older than the field)
    worst_host: str | None = None  # the host with the most errors/s, when any has errors
    worst_errors_per_s: float | None = None


class UltraServerEntry(_Section):
    id: str
    hosts: int
    chips: int
    hbm_capacity_bytes: int | None  # null when any member chip's capacity is unknown
    hbm_peak_sum_bytes: int | None  # sum of member chips' own peaks (not a simultaneous figure)
    util_mean_pct: float | None  # mean of member chips' window means
    efa: EfaEntry | None = None  # null: no member host's sysfs gave EFA rates


OutputName = Literal["recording", "snapshot", "receipt", "receipt-markdown", "receipt-svg"]


class OutputFailure(_Section):
    """An output that stopped during the session (the session itself went on)."""

    output: OutputName
    path: str
    error: str
    at: float  # unix seconds


Scope = Literal["job", "cluster", "ultraserver", "host", "hosts", "none"]


class Boundary(_Section):
    """What the figures cover: the fields `trnwatch compare` requires equal before comparing."""

    scope: Scope
    chips: int | None
    hosts: int | None
    ultraservers: int | None
    ranks: int | None  # the job's world size
    fabric: str | None
    instance_type: str | None
    device_type: str | None
    lnc: int | None
    compiler_version: str | None
    framework_version: str | None
    versions: dict[str, str] | None
    model: str | None
    params: int | None
    precision: str | None
    global_batch: int | None
    micro_batch: int | None
    seq_len: int | None
    sequence_lengths: str | None  # the per-step distribution in words, when steps carry seq_len
    parallel: str | None
    evidence: Evidence
    inferred_from: dict[str, str]  # field -> how it was obtained, where it is not read directly
    # The scheduler job (SLURM_JOB_* of trnwatch's environment at start, or --k8s-job's pods, or
    # the recording's): information that compare shows, not a field it requires equal; null
    # outside an allocation. A Kubernetes job's pods carry the host and ranks they were matched to.
    scheduler: SchedulerJob | None = None


class ColdCompile(_Section):
    start: float | None  # unix s (job clock) of the first compile phase
    end: float | None
    seconds: float | None  # time in compile phases that were not persistent-cache hits
    compiles: int
    cache_hits: int


class SteadySegment(_Section):
    start: float  # unix s (job clock): start of the first steady step
    end: float  # end of the last steady step
    first_step: int
    last_step: int
    steps: int
    tokens_per_s: float | None
    step_time_s: Percentiles
    inferred: bool  # true when no steady phase was emitted and the warm-up was inferred from step times
    from_rank: int
    # The goodput clock's latest steady step times (at most 1,024), for compare's noise interval.
    step_time_samples_s: list[float]


class RestartSegment(_Section):
    restart: int
    checkpoint_step: int | None
    load_s: float | None
    time_to_first_step_s: float | None
    steps_lost: int | None


class Segments(_Section):
    cold_compile: ColdCompile | None
    steady: SteadySegment | None
    restarts: list[RestartSegment]


class Goodput(_Section):
    from_rank: int | None
    window: Window  # job clock: first to last job event
    productive_s: float
    goodput_pct: float | None
    badput_s: Badput
    late_threshold_s: float
    method: str


class FailureRate(_Section):
    window_hours: float | None
    rank_failures: int
    rank_failures_per_hour: float | None
    restarts: int
    restarts_per_hour: float | None
    executions: int | None  # Neuron executions counted by neuron-monitor over every runtime
    execution_errors: int | None
    execution_errors_per_1000: float | None


class SequenceLengths(_Section):
    steps: int
    min: int
    max: int
    mean: float
    p50: int
    p90: int
    counts: dict[str, int]  # seq_len -> steps (the first 64 distinct lengths)
    other: int  # steps with a length beyond those


class TimelinePoint(_Section):
    t: float  # unix s, middle of the bucket
    tokens_per_s: float | None
    util_mean_pct: float | None
    hbm_used_pct: float | None


class Timeline(_Section):
    bucket_s: float
    points: list[TimelinePoint]
    note: str


class RecordingEntry(_Section):
    """The recording this session wrote; a write failure stopped only the recording."""

    path: str  # the file, or the folder of a rotated set
    files: list[str]
    frames: int
    bytes: int
    error: str | None  # e.g. "No space left on device (ENOSPC)"; null: recorded to the end
    stopped_at: float | None  # unix s when the recording stopped on that error


class ReplayEntry(_Section):
    """What a replay read: the recording, the window asked for, frames read and skipped."""

    recording: str
    schema_: str = Field(alias="schema")
    window_from: float | None  # unix s; null: from the recording's start
    window_to: float | None  # unix s; null: to its end
    frames_read: int
    frames_skipped: dict[str, int]  # by reason: truncated, corrupt, entry (an unreadable entry)


class StackSection(_Section):
    """Ranks' Python stacks taken during the session (py-spy dump: the job view's key, or a
    confirmed stall with --capture-stacks), oldest first, each with its outcome."""

    captures: list[StackCapture]
    dropped: int  # older captures let go to keep the bound (ledger/stacks.py)


class HardwareErrorEntry(_Section):
    """One distinct hardware error a kernel log reported (a NEURON_HW_ERR line), where it points."""

    error_type: str
    action: str | None
    host: str | None  # the ledger's host id when the line's instance id or hostname is a host of the telemetry
    instance_id: str | None  # as the line says
    hostname: str | None  # as the line says
    ultraserver: str | None
    chip: int | None  # nd-id
    nc_id: int | None  # as the line numbers the NeuronCore (within the device or on the host: not documented)
    serial_number: str | None
    first: float  # unix s the first such line was received
    last: float
    lines: int
    logged_at: str | None  # the kernel log's own time of the first line
    source: str  # the kernel-log source that read it


class KernelLogEntry(_Section):
    """What the kernel-log sources read: hardware errors, and the Neuron driver's other lines (counted)."""

    hardware_errors: list[HardwareErrorEntry]
    hardware_errors_dropped: int  # oldest lines dropped past the bound (ledger/hardware.py)
    driver_lines: dict[str, int]  # source id -> other Neuron driver lines


class SysfsDeviceEntry(_Section):
    device: int
    power_status: str | None  # null: no power/utilization node (unavailable)
    power_avg_pct: float | None  # the last minute's average, share of the device's maximum power
    power_min_pct: float | None
    power_max_pct: float | None
    unhealthy_components: str | None  # null: no node; "": none unhealthy


class SysfsHostEntry(_Section):
    """One host's sysfs figures at the window's end (collectors/sysfs.py, ledger/sysfs_host.py)."""

    host: str  # the sample's instance id (board_asset_tag), else the sampler's source id
    source: str
    samples: int
    efa_ports: int
    efa_rates_per_s: dict[str, float]  # summed over ports, last interval; a counter left out is unavailable
    devices: list[SysfsDeviceEntry]


class AlertCounts(_Section):
    """What alerting did in the session (trnwatch/alerts.py): the receipt's `alerts`."""

    destinations: list[str]  # "command", "webhook https://hooks.example.com" (scheme and host only)
    sent: int = 0
    failed: int = 0  # gave up after the retries, or dropped with the queue full
    suppressed: int = 0  # held down (a flapping finding pages once per hold-down interval)
    retried: int = 0
    pending_at_exit: int = 0  # still queued or being delivered when the receipt was written


class Receipt(_Section):
    # `schema` is a BaseModel attribute, so the field is `schema_` with the JSON key `schema`.
    schema_: str = Field(alias="schema")
    tool: str
    evidence: Evidence
    recorded_evidence: Evidence | None  # for a replay: what the recorded session was
    window: Window
    exit_reason: ExitReason
    written_at: float
    # Unix s the job's verdict, stalls, badput and the sources' gaps were judged at: the session's
    # end (for a replay, the recorded session's end or the window's); null when nothing arrived.
    judged_at: float | None = None
    counter_rule: str
    sources: list[SourceEntry]
    hosts: list[HostEntry]
    # Hosts lost past HOST_FORGET_AFTER_S and dropped from a full table (MAX_HOSTS) to admit new ones.
    hosts_forgotten: int = 0
    chips: list[ChipEntry]
    runtimes: list[RuntimeEntry]
    ultraservers: list[UltraServerEntry]
    boundary: Boundary
    segments: Segments | None  # null without job telemetry
    goodput: Goodput | None
    failure_rate: FailureRate
    sequence_lengths: SequenceLengths | None  # null unless steps carry seq_len
    timeline: Timeline
    job: JobSection | None  # typed in ledger/job_summary.py
    # Every finding of the session as an incident, in opening order (ledger/incidents.py), and
    # how many were dropped past the bound.
    incidents: list[Incident] = []
    incidents_dropped: int = 0
    alerts: AlertCounts | None = None  # null without --alert-cmd / --alert-webhook
    output_failures: list[OutputFailure] = []
    kernel_log: KernelLogEntry | None = None  # null when no kernel-log source ran
    sysfs: list[SysfsHostEntry] = []  # empty when no sysfs source ran
    # Hosts whose sysfs was dropped from a full sysfs table the same way (`hosts_forgotten`).
    sysfs_hosts_forgotten: int = 0
    efa: EfaEntry | None = None  # the cluster's EFA rates (every host with sysfs); null without any
    recording: RecordingEntry | None = None
    replay: ReplayEntry | None = None
    stacks: StackSection | None = None  # null: no stack was taken
    monitor: MonitorEntry | None = None  # null: no source marked how far it was read

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def to_json(self) -> str:
        # Outside strings keep their exact value, but control and bidi characters are escaped.
        return json_safe(self.model_dump_json(by_alias=True, indent=2)) + "\n"


def receipt_json_schema() -> dict:
    """JSON Schema of the receipt, exported from the model."""
    return Receipt.model_json_schema(by_alias=True)


def _r(value: float | None, places: int = 3) -> float | None:
    return None if value is None else round(value, places)


def build_receipt(
    ledger: Ledger,
    exit_reason: ExitReason,
    recorded_evidence: Evidence | None = None,
    *,
    written_at_s: float,
    output_failures: Sequence[OutputFailure] = (),
    recording: RecordingEntry | None = None,
    replay: ReplayEntry | None = None,
    incidents: IncidentLog | None = None,
    alerts: AlertCounts | None = None,
) -> Receipt:
    """Assemble the receipt from the ledger's current state, written at `written_at_s` (wall clock,
    passed in). The job's verdict, stalls and badput and the sources' gaps are judged at the
    session's end (`Ledger.latest_s`: its end mark, which a recording holds too), so the silence
    at the end counts as the screen counted it, and a replay judges the same."""
    judged_s = ledger.latest_s()
    job = ledger.job_summary(judged_s) if judged_s is not None else None
    hosts = sorted(ledger.hosts.values(), key=lambda h: h.host_id)
    chips = [_chip_entry(h, c, None if job is None else job.precision) for h in hosts for c in h.chips]
    runtimes = [_runtime_entry(h, r) for h in hosts for r in sorted(h.runtimes.values(), key=lambda r: r.order)]
    start, end = ledger.first_s, ledger.last_s
    clock = ledger.goodput
    goodput = _goodput(clock, _silence_at_end_s(ledger, job, judged_s))
    read = ledger.read(judged_s) if judged_s is not None else None
    periods = read.source_periods_s if read is not None else {}
    return Receipt(
        schema_=SCHEMA,
        tool=f"trnwatch {__version__}",
        evidence=ledger.evidence,
        recorded_evidence=recorded_evidence,
        window=Window(
            start=start, end=end, seconds=round(end - start, 3) if start is not None and end is not None else 0.0
        ),
        exit_reason=exit_reason,
        written_at=written_at_s,
        judged_at=judged_s,
        counter_rule=COUNTER_RULE,
        sources=[
            _source_entry(s, judged_s, periods) for s in sorted(ledger.sources.values(), key=lambda s: s.source_id)
        ],
        hosts=[_host_entry(ledger, h) for h in hosts],
        hosts_forgotten=ledger.hosts_forgotten,
        chips=chips,
        runtimes=runtimes,
        ultraservers=_ultraserver_entries(ledger, read),
        boundary=boundary_of(ledger, job, clock),
        segments=None if job is None else _segments(job, clock),
        goodput=goodput,
        failure_rate=_failure_rate(job, goodput, runtimes),
        sequence_lengths=_sequence_lengths(clock),
        timeline=_timeline(ledger, clock),
        job=job,
        incidents=[] if incidents is None else with_stacks(incidents.incidents(), ledger.stacks.captures),
        incidents_dropped=0 if incidents is None else incidents.dropped,
        alerts=alerts,
        output_failures=list(output_failures),
        kernel_log=_kernel_log(ledger),
        sysfs=[_sysfs_entry(h) for _, h in sorted(ledger.sysfs.items())],
        sysfs_hosts_forgotten=ledger.sysfs_hosts_forgotten,
        efa=None if read is None else _efa_entry(read.efa_cluster),
        recording=recording,
        replay=replay,
        stacks=StackSection(captures=list(ledger.stacks.captures), dropped=ledger.stacks.dropped)
        if len(ledger.stacks)
        else None,
        monitor=_monitor_entry(ledger, judged_s),
    )


def _monitor_entry(ledger: Ledger, judged_s: float | None) -> MonitorEntry | None:
    lag = ledger.lag
    unread = [s for s in ledger.sources.values() if s.unread_bytes]
    if lag.through_s is None and not lag.followers and not unread:
        return None
    behind = {} if judged_s is None else lag.behind_s(judged_s)
    return MonitorEntry(
        behind_at_end_s={k: round(v, 3) for k, v in sorted(behind.items())},
        worst_behind_s={k: round(v, 3) for k, v in sorted(lag.worst_behind_s.items())},
        pauses=lag.pauses,
        paused_s=round(lag.paused_s, 3),
        longest_pause_s=round(lag.longest_pause_s, 3),
        held_ticks=lag.held_ticks,
        unread_at_exit_lines=sum(s.unread_lines for s in unread),
        unread_at_exit_bytes=sum(s.unread_bytes for s in unread),
        unread_at_exit_sources=len(unread),
    )


def _sysfs_entry(h: HostSysfs) -> SysfsHostEntry:
    devices = []
    for device, health in sorted(h.devices.items()):
        power = health.power
        devices.append(
            SysfsDeviceEntry(
                device=device,
                power_status=None if power is None else power.status,
                power_avg_pct=None if power is None else power.avg_pct,
                power_min_pct=None if power is None else power.min_pct,
                power_max_pct=None if power is None else power.max_pct,
                unhealthy_components=health.unhealthy_components,
            )
        )
    return SysfsHostEntry(
        host=h.key,
        source=h.source_id,
        samples=h.samples,
        efa_ports=h.efa_ports,
        efa_rates_per_s={k: round(v, 3) for k, v in sorted(h.efa_rates_per_s.items())},
        devices=devices,
    )


def _kernel_log(ledger: Ledger) -> KernelLogEntry | None:
    if not any(s.kind == "kernel-log" for s in ledger.sources.values()):
        return None
    errors = []
    for first, last, lines in ledger.kernel.faults():
        e = first.error
        host = ledger.host_of_hardware_error(first)
        errors.append(
            HardwareErrorEntry(
                error_type=e.error_type,
                action=e.action,
                host=None if host is None else host.host_id,
                instance_id=e.instance_id,
                hostname=e.hostname,
                ultraserver=None if host is None else ledger.ultraserver_of(host),
                chip=e.device,
                nc_id=e.core,
                serial_number=e.serial_number,
                first=first.t_s,
                last=last.t_s,
                lines=lines,
                logged_at=e.logged_at,
                source=first.source_id,
            )
        )
    return KernelLogEntry(
        hardware_errors=errors,
        hardware_errors_dropped=ledger.kernel.errors_dropped,
        driver_lines=dict(sorted(ledger.kernel.driver_lines.items())),
    )


def _source_failure(s, state: str | None, end_s: float | None) -> str | None:
    """Why a source failed, in words (None: it did not)."""
    if s.end_error:
        why = s.end_error
    elif state == "lost":
        silent = "" if s.last_s is None or end_s is None else f"silent for {end_s - s.last_s:.0f} s"
        why = s.link_error or silent or "lost"
    elif s.last_s is None and (s.link is not None or s.ended_s is not None):
        why = s.link_error or ("still connecting at the end" if s.ended_s is None else "ended without a line")
    else:
        return None
    return f"never connected: {why}" if s.last_s is None else why


def _source_entry(s, end_s: float | None, periods: Mapping[str, float]) -> SourceEntry:
    # A device stream lost by silence at the window's end counts that silence as a gap.
    gaps, gap_s = (s.gaps, s.gap_s) if end_s is None else s.gaps_at(end_s, periods.get(s.source_id))
    state = None if end_s is None else s.state(end_s, periods.get(s.source_id))
    return SourceEntry(
        id=s.source_id,
        kind=s.kind,
        reports=s.reports,
        rejected=sum(s.rejected.values()),
        rejected_by_reason=dict(sorted(s.rejected.items())),
        last_rejection=s.last_rejection,
        rejected_fields=dict(sorted(s.rejected_fields.items())),
        last_field_rejection=s.last_field_rejection,
        gaps=gaps,
        gap_seconds=round(gap_s, 3),
        ended=s.ended_s is not None,
        end_error=s.end_error,
        simulated=s.simulated,
        log_profile=s.log_profile,
        unparsed_lines=s.unparsed_lines,
        error_files=dict(s.error_files),
        state=state,
        failed=_source_failure(s, state, end_s),
        unread_at_exit_bytes=s.unread_bytes,
        unread_at_exit_lines=s.unread_lines,
    )


def _host_entry(ledger: Ledger, h: HostState) -> HostEntry:
    placed = ledger.membership(h)
    return HostEntry(
        host=h.host_id,
        source=h.source_id,
        ultraserver=placed.ultraserver,
        ultraserver_from=placed.origin,
        ultraserver_detail=placed.detail,
        instance_type=h.instance_type,
        device_type=h.device_type,
        neuroncore_version=h.neuroncore_version,
        lnc=h.lnc,
        chips=len(h.chips),
        cores_per_chip=h.cores_per_chip,
        reports=h.reports,
        anomalies=dict(h.anomalies),
        group_errors=dict(h.group_errors),
        runtimes_evicted=h.runtimes_evicted,
        instance_id=h.host_id if h.host_id != h.source_id else None,
        name=h.instance_name,
        pods=[f"{ledger.scheduler.namespace}/{p.name}" for p in ledger.pods_on(h)]
        if isinstance(ledger.scheduler, KubernetesJob)
        else [],
    )


def peak_flops_per_s(device_type: str | None, precision: str | None) -> float | None:
    """The assumed dense peak of one chip (PEAK_FLOPS_ASSUMPTION), or None when unknown: a
    device type not in the table, or a job precision other than BF16."""
    if precision is not None and "bf16" not in precision.lower():
        return None
    return PEAK_BF16_FLOPS_PER_CHIP.get((device_type or "").lower())


def _device_latency(h: HostState, chip: int) -> LatencyPercentiles | None:
    """Latest device latency percentiles of the runtimes on a chip (the worst if several)."""
    if not h.cores_per_chip:
        return None
    found = [
        r.device_latency_s
        for r in h.runtimes.values()
        if r.device_latency_s and any(core // h.cores_per_chip == chip for core in r.cores)
    ]
    p50 = [d["p50"] for d in found if "p50" in d]
    p99 = [d["p99"] for d in found if "p99" in d]
    if not p50 and not p99:
        return None
    return LatencyPercentiles(p50=max(p50) if p50 else None, p99=max(p99) if p99 else None)


def _chip_entry(h: HostState, c, precision: str | None) -> ChipEntry:
    totals = c.ecc.totals()
    reading = c.ecc.reading
    flops = c.flops_mean_per_s
    peak = peak_flops_per_s(h.device_type, precision)
    return ChipEntry(
        host=h.host_id,
        device=c.index,
        hbm_capacity_bytes=c.hbm_capacity_bytes,
        hbm_peak_bytes=c.hbm_peak_bytes,
        util_mean_pct=_r(c.util_mean_pct),
        util_max_pct=_r(c.util_max_pct),
        samples=c.samples,
        device_latency_s=_device_latency(h, c.index),
        flops_mean_per_s=None if flops is None else round(flops),
        peak_flops_per_s=peak,
        mfu_pct=None if flops is None or not peak else _r(100 * flops / peak),
        util_stale_samples=c.util_stale_samples,
        ecc=Ecc(
            mem_corrected=totals.get("mem_ecc_corrected"),
            mem_uncorrected=totals.get("mem_ecc_uncorrected"),
            sram_corrected=totals.get("sram_ecc_corrected"),
            sram_uncorrected=totals.get("sram_ecc_uncorrected"),
        ),
        ecc_reading=reading,
        ecc_readings=c.ecc.both_readings() if None in totals.values() else None,
        host_name=h.instance_name,
    )


def _runtime_entry(h: HostState, r) -> RuntimeEntry:
    reading = r.executions.reading
    totals = r.executions.totals()
    return RuntimeEntry(
        host=h.host_id,
        pid=r.pid,
        tag=r.tag,
        cores=list(r.cores),
        executions=ExecutionCounts(
            reading=reading,
            reports=r.executions.reports,
            totals=totals,
            readings=r.executions.both_readings() if None in totals.values() else None,
        ),
        total_latency_s=r.total_latency_s,
        loaded_models=[m.name for m in r.loaded_models],
        group_errors=dict(r.group_errors),
    )


def _ultraserver_entries(ledger: Ledger, read: ReadModel | None) -> list[UltraServerEntry]:
    out = []
    for us, hosts in sorted(ledger.ultraservers().items()):
        chips = [c for h in hosts for c in h.chips]
        capacities = [c.hbm_capacity_bytes for c in chips]
        peaks = [c.hbm_peak_bytes for c in chips]
        means = [c.util_mean_pct for c in chips if c.util_mean_pct is not None]
        out.append(
            UltraServerEntry(
                id=us,
                hosts=len(hosts),
                chips=len(chips),
                hbm_capacity_bytes=known_sum(capacities),
                hbm_peak_sum_bytes=known_sum(peaks),
                util_mean_pct=_r(sum(means) / len(means)) if means else None,
                efa=None if read is None else _efa_entry(read.efa(us)),
            )
        )
    return out


def _efa_entry(rollup: EfaRollup | None) -> EfaEntry | None:
    """The read model's EFA rollup as the receipt keeps it: null when sysfs was not sampled or no
    member host gave rates (never a zero)."""
    if rollup is None or not rollup.hosts:
        return None
    return EfaEntry(
        hosts=rollup.hosts,
        tx_bytes_per_s=_r(rollup.tx_bytes_per_s),
        rx_bytes_per_s=_r(rollup.rx_bytes_per_s),
        errors_per_s=_r(rollup.errors_per_s),
        members=rollup.members,
        worst_host=rollup.worst_host,
        worst_errors_per_s=_r(rollup.worst_errors_per_s),
    )


# --- boundary, segments, goodput, rates -----------------------------------------------------------


def _fabric(hosts: int, ultraservers: set[str], unplaced: int, device_type: str | None) -> tuple[str | None, str]:
    """The fabric the figures crossed, and what that is inferred from."""
    switch = "NeuronSwitch-v1" if device_type == "trainium3" else "NeuronLink"
    why = (
        f"{hosts} host(s); UltraServer membership from the --ultraservers file, Kubernetes, sysfs, Slurm or "
        "the reports (hosts[].ultraserver_from); "
        f"{switch} inside an UltraServer from the device type ({device_type or 'unknown'}), EFA between"
    )
    if hosts == 0:
        return None, "no host"
    if hosts == 1:
        return "intra-host", why
    if unplaced and not ultraservers:
        return "EFA", why + "; no host is in an UltraServer"
    if unplaced:
        return None, why + f"; {unplaced} host(s) in no UltraServer: fabric unknown"
    if len(ultraservers) == 1:
        return switch, why
    return f"{switch} within each of {len(ultraservers)} UltraServers, EFA between", why


def boundary_of(ledger: Ledger, job: JobSection | None, clock: GoodputClock | None) -> Boundary:
    """The receipt's boundary: the job's ranks and where they ran when job telemetry is connected,
    else every host the session saw."""
    inferred: dict[str, str] = {}
    scope: Scope
    if job is not None and ledger.job is not None:
        ranks = list(ledger.job.ranks.values())
        rank_hosts = {r.host for r in ranks if r.host}
        matched = {name: ledger.host_named(name) for name in rank_hosts}
        hosts = [h for h in matched.values() if h is not None]
        unmatched = len(rank_hosts) - len(hosts)
        chips = {(r.host, r.chip) for r in ranks if r.host and r.chip is not None}
        scope, n_hosts, n_chips = "job", len(rank_hosts), len(chips) or None
        inferred["chips"] = "distinct (host, chip) of the ranks' run_start" if chips else "ranks report no chip"
        inferred["hosts"] = "distinct hosts of the ranks' run_start" + (
            f"; {unmatched} not matched to a device stream" if unmatched else ""
        )
        us = {u for h in hosts if (u := ledger.ultraserver_of(h)) is not None}
        unplaced = sum(1 for h in hosts if ledger.ultraserver_of(h) is None) + unmatched
    else:
        hosts = list(ledger.hosts.values())
        us = {u for h in hosts if (u := ledger.ultraserver_of(h)) is not None}
        unplaced = sum(1 for h in hosts if ledger.ultraserver_of(h) is None)
        n_hosts, n_chips = len(hosts), sum(len(h.chips) for h in hosts) or None
        scope = (
            "none"
            if not hosts
            else "host"
            if len(hosts) == 1
            else ("ultraserver" if len(us) == 1 else "cluster")
            if us and not unplaced
            else "hosts"
        )
    device_type = one_value(h.device_type for h in hosts)
    fabric, inferred["fabric"] = _fabric(n_hosts, us, unplaced, device_type)
    inferred["ultraservers"] = "UltraServer ids of those hosts (configuration first, then the reports)"
    versions = None if job is None else job.versions
    model = None if job is None else job.model
    parallel = None if job is None else job.parallel
    lnc = None if job is None else job.lnc
    if lnc is None:
        lnc = hosts_lnc(h.lnc for h in hosts)
        if lnc is not None:
            inferred["lnc"] = "neuron_hardware_info.logical_neuroncore_config of the hosts"
    seq = _sequence_lengths(clock)
    return Boundary(
        scope=scope,
        chips=n_chips,
        hosts=n_hosts,
        ultraservers=len(us),
        ranks=None if job is None else job.ranks.world_size,
        fabric=fabric,
        instance_type=one_value(h.instance_type for h in hosts),
        device_type=device_type,
        lnc=lnc,
        compiler_version=version_of(versions, COMPILER_KEYS),
        framework_version=version_of(versions, FRAMEWORK_KEYS),
        versions=versions,
        model=None if model is None else model.name,
        params=None if model is None else model.params,
        precision=None if job is None else job.precision,
        global_batch=None if job is None else job.global_batch,
        micro_batch=None if job is None else job.micro_batch,
        seq_len=None if job is None else job.seq_len,
        sequence_lengths=None
        if seq is None
        else (f"{seq.min}" if seq.min == seq.max else f"{seq.min}-{seq.max}, p50 {seq.p50}, p90 {seq.p90}"),
        parallel=parallel_text(parallel),
        evidence=ledger.evidence,
        inferred_from=inferred,
        scheduler=_scheduler(ledger),
    )


def _scheduler(ledger: Ledger) -> SchedulerJob | None:
    """The scheduler job; a Kubernetes job with its pods placed on the session's hosts and ranks."""
    job = ledger.scheduler
    if not isinstance(job, KubernetesJob):
        return job
    ranks = ledger.job.ranks if ledger.job is not None else {}
    named = {name: ledger.host_named(name) for name in {r.host for r in ranks.values() if r.host}}
    rank_hosts = {n: named[r.host] if r.host else None for n, r in ranks.items()}
    return placed_job(job, ledger.hosts.values(), rank_hosts)


def _segments(job: JobSection, clock: GoodputClock | None) -> Segments:
    compiles = [p for p in job.phases if p.phase == "compile"]
    ended = [p.end_ts for p in compiles if p.end_ts is not None]
    cold = ColdCompile(
        start=compiles[0].begin_ts if compiles else None,
        end=max(ended) if ended else None,
        seconds=_r(job.cold_compile_s),
        compiles=job.cold_compiles,
        cache_hits=job.compile_cache_hits,
    )
    # The job ledger's steady segment (the figures the job section and the headline quote); the
    # step-time samples for compare's noise interval are the goodput clock's steady steps.
    t = job.throughput
    steady = (
        None
        if t is None
        else SteadySegment(
            start=t.begin_ts,
            end=t.end_ts,
            first_step=t.first_step,
            last_step=t.last_step,
            steps=t.steps_in_window,
            tokens_per_s=_r(t.tokens_per_s),
            step_time_s=t.step_time_s,
            inferred=t.boundary == "inferred",
            from_rank=t.from_rank,
            step_time_samples_s=[round(v, 6) for v in clock.steady_samples_s] if clock is not None else [],
        )
    )
    restarts = [
        RestartSegment(
            restart=r.restart,
            checkpoint_step=r.from_step,
            load_s=_r(r.checkpoint_load_s),
            time_to_first_step_s=_r(r.restart_to_first_step_s),
            steps_lost=r.steps_redone,
        )
        for r in job.restarts
    ]
    return Segments(cold_compile=cold if compiles or cold.cache_hits else None, steady=steady, restarts=restarts)


def _silence_at_end_s(ledger: Ledger, job: JobSection | None, judged_s: float | None) -> float:
    """How long the monitor saw no job event before the session ended, while the job ran (a
    finished or failed run's quiet after its end is no badput)."""
    if job is None or judged_s is None or ledger.job is None or ledger.job.last_received_s is None:
        return 0.0
    if job.verdict in ("finished", "failed", "no-data"):
        return 0.0
    return max(0.0, judged_s - ledger.job.last_received_s)


def _goodput(clock: GoodputClock | None, silence_s: float) -> Goodput | None:
    g = clock.breakdown(silence_s) if clock is not None else None
    if g is None:
        return None
    return Goodput(
        from_rank=g.from_rank,
        window=Window(start=g.start, end=g.end, seconds=g.window_s),
        productive_s=g.productive_s,
        goodput_pct=g.goodput_pct,
        badput_s=g.badput_s,
        late_threshold_s=g.late_threshold_s,
        method=GOODPUT_METHOD,
    )


def _failure_rate(job: JobSection | None, goodput: Goodput | None, runtimes: list[RuntimeEntry]) -> FailureRate:
    hours = goodput.window.seconds / 3600 if goodput is not None and goodput.window.seconds > 0 else None
    # A rank gone silent is counted once, among the dead (the job section lists it as a silent failure too).
    failed_ranks = set() if job is None else {f.rank for f in job.failures if f.kind != "silent"}
    rank_failures = len(failed_ranks) + (0 if job is None else job.ranks.dead)
    restarts = 0 if job is None else len(job.restarts)
    executions = errors = 0
    known = bool(runtimes)
    for rt in runtimes:
        statuses = {k.removeprefix("status."): v for k, v in rt.executions.totals.items() if k.startswith("status.")}
        total = known_sum(list(statuses.values()))
        if not statuses or total is None:
            known = False
            continue
        executions += total
        errors += sum(statuses.get(k) or 0 for k in EXECUTION_ERROR_STATUSES)
    return FailureRate(
        window_hours=_r(hours, 6),
        rank_failures=rank_failures,
        rank_failures_per_hour=_r(rank_failures / hours) if hours else None,
        restarts=restarts,
        restarts_per_hour=_r(restarts / hours) if hours else None,
        executions=executions if known else None,
        execution_errors=errors if known else None,
        execution_errors_per_1000=_r(1000 * errors / executions) if known and executions else None,
    )


def _sequence_lengths(clock: GoodputClock | None) -> SequenceLengths | None:
    seq = clock.sequence_lengths if clock is not None else None
    if seq is None or not seq.steps or seq.smallest is None or seq.largest is None:
        return None
    ordered = sorted(seq.counts.elements())
    p50, p90 = percentile(ordered, 50), percentile(ordered, 90)
    if p50 is None or p90 is None:  # counts holds the first lengths seen: never empty once a step came
        return None
    return SequenceLengths(
        steps=seq.steps,
        min=seq.smallest,
        max=seq.largest,
        mean=round(seq.total / seq.steps, 3),
        p50=p50,
        p90=p90,
        counts={str(k): v for k, v in sorted(seq.counts.items())},
        other=seq.other,
    )


def _timeline(ledger: Ledger, clock: GoodputClock | None) -> Timeline:
    """Throughput, mean chip utilisation and HBM fill over the window, in TIMELINE_POINTS buckets
    (the receipt's picture is drawn from these)."""
    starts = [t for t in (ledger.first_s, clock.first_ts if clock else None) if t is not None]
    ends = [t for t in (ledger.last_s, clock.last_ts if clock else None) if t is not None]
    note = (
        f"bucket means; throughput from the timeline rank's latest {THROUGHPUT_POINTS} steps, chip figures from "
        f"each chip's latest {HISTORY_SAMPLES} samples"
    )
    if not starts or max(ends) <= min(starts):
        return Timeline(bucket_s=0.0, points=[], note=note)
    t0, t1 = min(starts), max(ends)
    # A bucket spans at least two sampling intervals, so jitter never leaves one empty (a gap is drawn
    # only where samples really are missing).
    # Only forward intervals: steps can share a timestamp (a log at 1 s resolution, lines without
    # one read in the same poll) or go back (out-of-order stamps), and neither is a sampling interval.
    steps = [b - a for (a, _), (b, _) in pairwise(clock.throughput_points) if b > a] if clock else []
    sampling_s = max(
        [h.period_s or 1.0 for h in ledger.hosts.values()] + ([median(steps)] if steps else []), default=1.0
    )
    n = max(1, min(TIMELINE_POINTS, int((t1 - t0) / (2 * sampling_s))))
    width = (t1 - t0) / n
    sums = [[0.0, 0, 0.0, 0, 0.0, 0] for _ in range(n)]  # tokens/s, n, util, n, hbm %, n

    def bucket(t: float) -> list:
        return sums[min(n - 1, max(0, int((t - t0) / width)))]

    for t, tokens_per_s in clock.throughput_points if clock else ():
        b = bucket(t)
        b[0] += tokens_per_s
        b[1] += 1
    for h in ledger.hosts.values():
        for c in h.chips:
            for sample in c.history:
                b = bucket(sample.t_s)
                if sample.util_pct is not None:
                    b[2] += sample.util_pct
                    b[3] += 1
                if sample.hbm_bytes is not None and c.hbm_capacity_bytes:
                    b[4] += 100 * sample.hbm_bytes / c.hbm_capacity_bytes
                    b[5] += 1
    points = [
        TimelinePoint(
            t=round(t0 + (i + 0.5) * width, 3),
            tokens_per_s=_r(b[0] / b[1]) if b[1] else None,
            util_mean_pct=_r(b[2] / b[3]) if b[3] else None,
            hbm_used_pct=_r(b[4] / b[5]) if b[5] else None,
        )
        for i, b in enumerate(sums)
    ]
    return Timeline(bucket_s=round(width, 6), points=points, note=note)
