"""Decode: a raw `Line` into the typed records the ledger folds, by the decoder its kind names.

This is the one place that knows which parser reads which line kind (`DECODERS`); the ledger
folds records only and never looks at text. A decoder never raises: whatever is wrong with a
line becomes a `Rejected` record (its reason is the counter key the source's stats keep), and
an unforeseen failure is a rejection too (`internal`), so one line can never end its source.
Decoding touches nothing but the line, so it can run anywhere (the session's intake decodes and
folds on the event loop, a slice at a time: trnwatch/intake.py says why not on a thread).

Line kinds and their records (each also `Rejected` when unusable):

- "neuron-monitor" (stdin, a neuron-monitor child, SSH, the demo): one `DeviceReport`;
- "prometheus" (one exporter scrape) and "promql" (one host's answers from a Prometheus
  server), collectors/prometheus.py: one `DeviceReport` per host, each rejected alone;
- "job" (a trnwatch.job/1 line: rank files, log profiles, checkpoints): one `DecodedJobLine`;
- "job-log" (a passive log's counts, collectors/job_log.py): one `JobLogStats`;
- "stack" (a rank's stack capture, made by the session itself: collectors/stack_records.py): one
  `StackCapture`. Its lines come from no source (SESSION_KINDS): the ledger keeps them apart.
- "rank-processes" (a pass over this host's rank processes, collectors/rank_processes.py): one
  `RankProcessSample`. Its lines come from no source either (SESSION_KINDS): a pass that finds
  nothing is no source gone quiet.
- "kernel-log" (a kernel log line: journalctl, dmesg, a file), collectors/kernel_log.py: one
  `HardwareError`, `DriverLine` (another Neuron driver line) or `OtherLine`;
- "sysfs" (one sysfs sample of a host, collectors/sysfs.py): one `SysfsSample`;
- "topology" (a scheduler's UltraServer membership, collectors/topology.py): one `TopologyAnswer`.
"""

from collections.abc import Callable
from dataclasses import dataclass

from trnwatch.collectors.job_events import (
    DecodedJobLine,
    JobLineError,
    JobLogStats,
    decode_job_line,
    parse_job_log_stats,
)
from trnwatch.collectors.kernel_log import KernelRecord, in_kernel_log_layout, parse_kernel_line
from trnwatch.collectors.lines import Line
from trnwatch.collectors.neuron_monitor import FieldRejection, Report, ReportRejected, decode_report
from trnwatch.collectors.prometheus import parse_prometheus_line
from trnwatch.collectors.rank_process_records import (
    RankProcessesRejected,
    RankProcessSample,
    decode_rank_processes,
)
from trnwatch.collectors.stack_records import StackCapture, StackLineError, decode_stack_line
from trnwatch.collectors.sysfs_sample import SysfsRejected, SysfsSample, decode_sysfs
from trnwatch.collectors.topology import TopologyAnswer, TopologyRejected, decode_topology


@dataclass(frozen=True, slots=True)
class Rejected:
    """A line (or one host of it) that cannot be used: counted against its source under `reason`."""

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class DeviceReport:
    """One host's report, with the values removed from it for being past their bound."""

    report: Report
    rejected_fields: tuple[FieldRejection, ...] = ()


Record = (
    DeviceReport
    | DecodedJobLine
    | JobLogStats
    | StackCapture
    | RankProcessSample
    | KernelRecord
    | SysfsSample
    | TopologyAnswer
    | Rejected
)


@dataclass(frozen=True, slots=True)
class Decoded:
    """What one line gave: its records, in order, with where and when the line came from."""

    source_id: str
    kind: str  # the line kind; its source's stats are kept under `SOURCE_KIND_OF.get(kind, kind)`
    received_s: float
    records: tuple[Record, ...]


def _neuron_monitor(text: str) -> list[Record]:
    try:
        report, rejected_fields = decode_report(text)
    except ReportRejected as exc:
        return [Rejected(exc.reason, exc.detail)]
    return [DeviceReport(report, tuple(rejected_fields))]


def _prometheus(kind: str) -> Callable[[str], list[Record]]:
    def decode(text: str) -> list[Record]:
        return [
            Rejected(item.reason, item.detail)
            if isinstance(item, ReportRejected)
            else DeviceReport(item, tuple(item.rejected_fields))
            for item in parse_prometheus_line(kind, text)
        ]

    return decode


def _job(text: str) -> list[Record]:
    try:
        return [decode_job_line(text)]
    except JobLineError as exc:
        return [Rejected("job-schema", str(exc))]


def _job_log(text: str) -> list[Record]:
    try:
        return [parse_job_log_stats(text)]
    except ValueError as exc:
        return [Rejected("job-log", str(exc))]


def _stack(text: str) -> list[Record]:
    try:
        return [decode_stack_line(text)]
    except StackLineError as exc:
        return [Rejected("stack-schema", str(exc))]


def _rank_processes(text: str) -> list[Record]:
    try:
        return [decode_rank_processes(text)]
    except RankProcessesRejected as exc:
        return [Rejected("rank-processes", str(exc))]


def _kernel_log(text: str) -> list[Record]:
    if not in_kernel_log_layout(text):
        return [Rejected("not-kernel-log", "neither journalctl short-iso, dmesg, nor a Neuron line")]
    return [parse_kernel_line(text)]


def _sysfs(text: str) -> list[Record]:
    try:
        return [decode_sysfs(text)]
    except SysfsRejected as exc:
        return [Rejected("sysfs", str(exc))]


def _topology(text: str) -> list[Record]:
    try:
        return [decode_topology(text)]
    except TopologyRejected as exc:
        return [Rejected("topology", str(exc))]


# Line kind -> its decoder (text -> records). A new line format is one entry here.
DECODERS: dict[str, Callable[[str], list[Record]]] = {
    "neuron-monitor": _neuron_monitor,
    "prometheus": _prometheus("prometheus"),
    "promql": _prometheus("promql"),
    "job": _job,
    "job-log": _job_log,
    "stack": _stack,
    "rank-processes": _rank_processes,
    "kernel-log": _kernel_log,
    "sysfs": _sysfs,
    "topology": _topology,
}
# Line kinds that carry device reports: their sources can be lost by silence.
DEVICE_KINDS = ("neuron-monitor", "prometheus", "promql")
# Line kinds the session writes itself (stack captures, rank-process passes): no source delivered
# them, so they register none and count in no source's figures.
SESSION_KINDS = ("stack", "rank-processes")
# A passive log's counts come from the same source as its job lines.
SOURCE_KIND_OF = {"job-log": "job"}


def decode(line: Line) -> Decoded:
    """The records of one line; never raises. An oversize line is rejected as `oversize`, a
    blank one gives no record, a line of an unknown kind is rejected as `unknown-kind`."""
    if line.oversize_bytes:
        records: list[Record] = [Rejected("oversize", f"line discarded past its bound, at {line.oversize_bytes} bytes")]
    elif not line.text or line.text.isspace():  # blank (isspace: no stripped copy of a 20 kB report)
        records = []
    else:
        decoder = DECODERS.get(line.kind)
        if decoder is None:
            records = [Rejected("unknown-kind", f"no decoder for line kind {str(line.kind)[:40]!r}")]
        else:
            try:
                records = decoder(line.text)
            except Exception as exc:  # noqa: BLE001 - last resort: a defect costs this line, never the source
                records = [Rejected("internal", f"{type(exc).__name__}: {exc}")]
    return Decoded(line.source_id, line.kind, line.received_s, tuple(records))
