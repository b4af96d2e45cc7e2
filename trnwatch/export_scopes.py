"""A recording as rows, one scope at a time (`trnwatch export`, `trnwatch.api.read`).

The recording is read as `replay` reads it (collectors/recording_reader.py: the same window, the
same carried job state) and every item is folded into a fresh ledger by the intake's own fold
(`fold_item`), so each row's figures are the ledger's, the ones the screen and the receipt read.
A row is taken right after the line that made it is folded: a chip row per chip per device
report, a rank row per job event, a job row per new step and per verdict change. Nothing is
kept per row: memory is the ledger's (bounded by its rings), whatever the recording's length.

No judgement runs where no column needs it: the chip, core and host scopes fold device lines
only (job lines only for `run_start`, whose precision MFU needs); the job scope asks for the
job's diagnosis at each new step and each clock mark; only the incidents scope runs the
session's own judgement (`Session.observe`, once per INCIDENT_PERIOD_S of the data's clock, as a
replay does).

A value a report did not give is None (a null in every format), never 0. Columns carry their
unit in their name; `time` is the receive time (chip, core, host, job) or the event's own time
(rank), unix seconds here, a UTC timestamp in every format.
"""

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from trnwatch.collectors.decode import DEVICE_KINDS, Decoded, DeviceReport, decode
from trnwatch.collectors.job_events import DecodedJobLine
from trnwatch.collectors.job_records import Checkpoint, Collective, Error, Heartbeat, Phase, RunStart, Step
from trnwatch.collectors.lines import Carried, ClockMark, Line, ReadMark, SourceEvent
from trnwatch.collectors.recording_reader import Recording
from trnwatch.intake import fold_item
from trnwatch.ledger.chips import ECC_FIELDS
from trnwatch.ledger.hosts import HostState
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import peak_flops_per_s
from trnwatch.ledger.snapshot import session_now_s
from trnwatch.outside import clean

ColumnKind = Literal["time", "str", "int", "float", "bool"]
Scope = Literal["chip", "core", "host", "rank", "job", "incidents"]
Row = tuple
Item = Line | SourceEvent | ClockMark | ReadMark | Carried

# neuron-monitor's `neuroncore_memory_usage` categories (its documentation's names); a category
# outside them counts in hbm_used_bytes only.
HBM_CATEGORIES = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")
JOB_KIND = "job"
VERDICT_CHECK_EVERY_S = 1.0  # the job scope asks for the verdict this often (the session judges as often)


@dataclass(frozen=True)
class Column:
    name: str
    kind: ColumnKind
    identity: bool = False  # names the row's subject (a label in OpenMetrics), not a figure


def _columns(*spec: tuple[str, ColumnKind] | tuple[str, ColumnKind, bool]) -> tuple[Column, ...]:
    return tuple(Column(*s) for s in spec)


CHIP_COLUMNS = _columns(
    ("time", "time"),
    ("host", "str", True),
    ("instance_name", "str", True),
    ("ultraserver", "str", True),
    ("chip", "int", True),
    ("hbm_used_bytes", "int"),
    ("hbm_capacity_bytes", "int"),
    ("util_pct", "float"),
    *((f"hbm_{c}_bytes", "int") for c in HBM_CATEGORIES),
    ("flops_per_s", "float"),
    ("mfu_pct", "float"),
    *((f"ecc_{name.replace('_ecc_', '_')}_events", "int") for name in ECC_FIELDS),  # the session's totals so far
)
CORE_COLUMNS = _columns(
    ("time", "time"),
    ("host", "str", True),
    ("chip", "int", True),
    ("core", "int", True),
    ("util_pct", "float"),
    ("flops_per_s", "float"),
)
HOST_COLUMNS = _columns(
    ("time", "time"),
    ("host", "str", True),
    ("instance_name", "str", True),
    ("ultraserver", "str", True),
    ("instance_type", "str"),
    ("vcpu_busy_pct", "float"),
    ("vcpu_count", "int"),
    ("memory_used_bytes", "int"),
    ("memory_total_bytes", "int"),
    ("efa_tx_bytes_per_s", "float"),
    ("efa_rx_bytes_per_s", "float"),
    ("efa_errors_per_s", "float"),
    ("source", "str"),
    ("source_state", "str"),
    ("source_gaps", "int"),
)
RANK_COLUMNS = _columns(
    ("time", "time"),
    ("rank", "int", True),
    ("host", "str", True),
    ("chip", "int", True),
    ("event", "str"),
    ("step", "int"),
    ("region", "str"),
    ("state", "str"),
    ("region_since", "time"),
    ("step_time_s", "float"),
    ("compute_s", "float"),
    ("tokens", "int"),
    ("loss", "float"),
    ("latency_s", "float"),
    ("wait_s", "float"),
    ("bytes", "int"),
    ("message", "str"),
)
JOB_COLUMNS = _columns(
    ("time", "time"),
    ("step", "int"),
    ("step_time_s", "float"),
    ("tokens_per_s", "float"),
    ("verdict", "str"),
    ("suspect_rank", "int"),
    ("suspect_host", "str"),
    ("suspect_chip", "int"),
    ("suspect_region", "str"),
)
INCIDENT_COLUMNS = _columns(
    ("time", "time"),  # opened
    ("closed", "time"),
    ("last_seen", "time"),
    ("id", "int", True),
    ("kind", "str", True),
    ("title", "str"),
    ("label", "str"),
    ("severity", "str"),
    ("worst_severity", "str"),
    ("state", "str"),
    ("rank", "int"),
    ("pid", "int"),
    ("host", "str"),
    ("instance_id", "str"),
    ("ultraserver", "str"),
    ("chip", "int"),
    ("core", "int"),
    ("region", "str"),
    ("step", "int"),
    ("source", "str"),
    ("evidence", "str"),
    ("hbm_rate_bytes_per_s", "float"),
    ("hbm_time_to_full_s", "float"),
)
COLUMNS: dict[Scope, tuple[Column, ...]] = {
    "chip": CHIP_COLUMNS,
    "core": CORE_COLUMNS,
    "host": HOST_COLUMNS,
    "rank": RANK_COLUMNS,
    "job": JOB_COLUMNS,
    "incidents": INCIDENT_COLUMNS,
}
SCOPES: tuple[Scope, ...] = tuple(COLUMNS)
JOB_SCOPES: frozenset[Scope] = frozenset({"rank", "job", "incidents"})  # scopes that fold every job line


@functools.lru_cache(maxsize=4096)
def _clean(value: str) -> str:
    return clean(value)


def _text(value: str | None) -> str | None:
    """An outside string as every output writes it (outside.clean: controls removed, secrets
    redacted); the same few host names come back on every row, so they are cleaned once."""
    return None if value is None else _clean(value)


class _DeviceRows:
    """Rows of the chip, core and host scopes: taken after each device report is folded, for
    the host it went to, from that report's own figures (a chip the report gave no HBM or
    utilisation sample has None there)."""

    def __init__(self, ledger: Ledger, scope: Scope):
        self.ledger, self.scope = ledger, scope

    def rows(self, item: Item, decoded: Decoded | None) -> Iterator[Row]:
        if decoded is None or decoded.kind not in DEVICE_KINDS:
            return
        for record in decoded.records:
            if not isinstance(record, DeviceReport):
                continue
            host = self.ledger.hosts.get(Ledger.host_id_of(record.report, decoded.source_id))
            if host is None or host.last_s != decoded.received_s:
                continue  # not kept (too many hosts), or its fold failed
            if self.scope == "chip":
                yield from self._chips(host, decoded.received_s)
            elif self.scope == "core":
                yield from self._cores(host, decoded.received_s)
            else:
                yield self._host(host, decoded.received_s, record.report.system_data is not None)

    def _chips(self, host: HostState, t: float) -> Iterator[Row]:
        ultraserver = self.ledger.ultraserver_of(host)
        job = self.ledger.job
        precision = job.run_start.precision if job is not None and job.run_start is not None else None
        peak = peak_flops_per_s(host.device_type, precision)
        for chip in host.chips:
            util_now = chip.util_at_s == t
            hbm_now = chip.hbm_at_s == t
            flops = None
            if util_now:
                figures = [c.flops for c in chip.cores.values() if c.flops is not None]
                if figures or (not chip.cores and chip.flops_samples):  # idle is 0 once FLOP/s were seen (chips.py)
                    flops = sum(figures)
            by_category = chip.hbm_by_category_bytes if hbm_now else {}
            totals = chip.ecc.totals() if chip.ecc.series else {}
            yield (
                t,
                _text(host.host_id),
                _text(host.instance_name),
                _text(ultraserver),
                chip.index,
                chip.hbm_bytes if hbm_now else None,
                chip.hbm_capacity_bytes,
                chip.util_pct if util_now else None,
                *(by_category.get(c) if hbm_now else None for c in HBM_CATEGORIES),
                flops,
                None if flops is None or not peak else 100 * flops / peak,
                *(totals.get(name) for name in ECC_FIELDS),
            )

    def _cores(self, host: HostState, t: float) -> Iterator[Row]:
        per_chip = host.cores_per_chip or 0
        for chip in host.chips:
            if chip.util_at_s != t:
                continue  # no utilisation sample of this chip in this report
            for core in range(chip.index * per_chip, (chip.index + 1) * per_chip):
                state = chip.cores.get(core)
                # neuron-monitor leaves idle cores out; the chip's mean counts them as 0 (ledger/chips.py)
                yield (
                    t,
                    _text(host.host_id),
                    chip.index,
                    core,
                    state.util_pct if state else 0.0,
                    state.flops if state else None,
                )

    def _host(self, host: HostState, t: float, system: bool) -> Row:
        ledger = self.ledger
        stats = ledger.sources.get(host.source_id)
        sysfs = ledger.sysfs.get(host.host_id) or ledger.sysfs.get(host.source_id)
        rates_fresh = sysfs is not None and sysfs.last_s is not None and t - sysfs.last_s <= sysfs.fresh_for_s
        rates = sysfs.efa_rates_per_s if rates_fresh and sysfs is not None else {}
        return (
            t,
            _text(host.host_id),
            _text(host.instance_name),
            _text(ledger.ultraserver_of(host)),
            _text(host.instance_type),
            host.vcpu_busy_pct if system else None,
            host.vcpu_count if system else None,
            host.memory_used_bytes if system else None,
            host.memory_total_bytes if system else None,
            rates.get("tx_bytes"),
            rates.get("rx_bytes"),
            sysfs.efa_error_rate_per_s if rates_fresh and sysfs is not None else None,
            _text(host.source_id),
            stats.state(t, host.period_s) if stats is not None else None,
            stats.gaps if stats is not None else None,
        )

    def end(self) -> Iterator[Row]:
        return iter(())


class _RankRows:
    """A row per job event of the window (the event's own time), with where the rank runs as
    the job ledger knows it after folding the event."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger

    def rows(self, item: Item, decoded: Decoded | None) -> Iterator[Row]:
        if decoded is None or decoded.kind != JOB_KIND or self.ledger.job is None:
            return
        for record in decoded.records:
            if isinstance(record, DecodedJobLine):
                row = self._row(record)
                if row is not None:
                    yield row

    def _row(self, record: DecodedJobLine) -> Row | None:
        e = record.event
        job = self.ledger.job
        rank = job.ranks.get(e.rank) if job is not None else None
        host, chip = (rank.host, rank.chip) if rank is not None else (None, None)
        step = region = state = since = step_time = compute = tokens = loss = latency = wait = size = message = None
        if isinstance(e, Step):
            step, step_time, compute, tokens, loss = e.step, e.step_time_s, e.compute_s, e.tokens, e.loss
        elif isinstance(e, Heartbeat):
            step, region, since = e.step, e.region, e.region_since
        elif isinstance(e, Phase):
            region, state = e.phase, e.state
        elif isinstance(e, Collective):
            step, region, latency, wait, size = e.step, f"collective:{e.op}", e.latency_s, e.wait_s, e.bytes
        elif isinstance(e, Checkpoint):
            step, region, state = e.step, f"checkpoint:{e.action}", e.state
        elif isinstance(e, Error):
            message = e.message
        elif not isinstance(e, RunStart):
            return None  # run_end, launcher: no figure of a rank's position
        return (
            e.ts,
            e.rank,
            _text(host),
            chip,
            e.event,
            step,
            _text(region),
            state,
            since,
            step_time,
            compute,
            tokens,
            loss,
            latency,
            wait,
            size,
            _text(message),
        )

    def end(self) -> Iterator[Row]:
        return iter(())


class _JobRows:
    """A row per new step of the job (the first rank to report it: its time and step time) and
    per verdict change (at a clock mark), and one at the window's end; tokens/s and the verdict
    are the job's at that moment, as the screen showed them."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.step: int | None = None
        self.verdict: str | None = None
        self._checked_s: float | None = None

    def _now(self) -> float:
        return session_now_s(self.ledger, 0.0, self.ledger.job)

    def _row(self, t: float, step_time_s: float | None) -> Row:
        now = self._now()
        diagnosis = self.ledger.job_diagnosis(now)
        job = self.ledger.job
        tokens = job.throughput_tokens_per_s(now) if job is not None else None
        self.verdict = diagnosis.verdict if diagnosis is not None else None
        suspect = diagnosis.suspects[0] if diagnosis is not None and diagnosis.suspects else None
        return (
            t,
            self.step,
            step_time_s,
            tokens,
            self.verdict,
            suspect.rank if suspect else None,
            _text(suspect.host) if suspect else None,
            suspect.chip if suspect else None,
            _text(suspect.region) if suspect else None,
        )

    def rows(self, item: Item, decoded: Decoded | None) -> Iterator[Row]:
        if self.ledger.job is None:
            return
        if decoded is not None and decoded.kind == JOB_KIND:
            for record in decoded.records:
                e = record.event if isinstance(record, DecodedJobLine) else None
                if isinstance(e, Step) and (self.step is None or e.step > self.step):
                    self.step = e.step
                    yield self._row(e.ts, e.step_time_s)
        now = self._now()
        if self._checked_s is None or now - self._checked_s >= VERDICT_CHECK_EVERY_S or now < self._checked_s:
            self._checked_s = now  # a verdict changes with time too (LATE): asked once a second of the data's clock
            diagnosis = self.ledger.job_diagnosis(now)
            if diagnosis is not None and diagnosis.verdict != self.verdict:
                yield self._row(now, None)

    def end(self) -> Iterator[Row]:
        if self.ledger.job is not None:
            yield self._row(self._now(), None)


class _IncidentRows:
    """The session's incidents (ledger/incidents.py), judged as a replay judges them: by the
    session's own `observe`, once per INCIDENT_PERIOD_S of the data's clock and at the end."""

    def __init__(self, ledger: Ledger):
        from trnwatch.session import Session  # the judgement's owner; it imports the session's outputs

        self.ledger = ledger
        self.session = Session(ledger, [])
        self._observed: float | None = None

    def rows(self, item: Item, decoded: Decoded | None) -> Iterator[Row]:
        from trnwatch.session import INCIDENT_PERIOD_S

        now = self.session.now_s()
        if self._observed is None or now - self._observed >= INCIDENT_PERIOD_S or now < self._observed:
            self.session.observe(now)
            self._observed = now
        return iter(())

    def end(self) -> Iterator[Row]:
        ended = self.ledger.latest_s()
        self.session.observe(ended if ended is not None else self.session.now_s())
        for i in self.session.incidents.incidents():
            s, ev = i.site, i.evidence
            yield (
                i.first,
                i.cleared,
                i.last,
                i.id,
                i.kind,
                i.title,
                i.label,
                i.severity,
                i.worst_severity,
                i.state,
                s.rank,
                s.pid,
                _text(s.host),
                _text(s.instance_id),
                _text(s.ultraserver),
                s.chip,
                s.core,
                _text(s.region),
                s.step,
                _text(s.source),
                _text(ev.text),
                ev.hbm_rate_bytes_per_s,
                ev.hbm_time_to_full_s,
            )


def _readers(ledger: Ledger, scope: Scope) -> _DeviceRows | _RankRows | _JobRows | _IncidentRows:
    if scope in ("chip", "core", "host"):
        return _DeviceRows(ledger, scope)
    if scope == "rank":
        return _RankRows(ledger)
    if scope == "job":
        return _JobRows(ledger)
    return _IncidentRows(ledger)


def recorded_ledger(recording: Recording) -> Ledger:
    """A ledger for a recording, set up as `replay` sets up its own (the recorded UltraServer
    map, rules and scheduler job)."""
    from trnwatch.sources import recorded_rules

    header = recording.header
    return Ledger("replayed", dict(header.ultraservers), recorded_rules(header.rules), header.scheduler)


def scope_rows(
    recording: Recording, scopes: tuple[Scope, ...], from_s: float | None = None, to_s: float | None = None
) -> Iterator[tuple[Scope, Row]]:
    """(scope, row) for every row of `scopes` in the window [from_s, to_s), in the order the
    lines were recorded; incident rows last (an incident's row is whole once judged at the end)."""
    ledger = recorded_ledger(recording)
    readers = [(scope, _readers(ledger, scope)) for scope in scopes]
    every_job_line = bool(JOB_SCOPES.intersection(scopes))
    for item in recording.items(from_s, to_s, carry=every_job_line):
        decoded = None
        if isinstance(item, Line):
            if item.kind == JOB_KIND and not every_job_line and '"run_start"' not in item.text:
                continue  # the device scopes need of the job only its precision (MFU)
            decoded = decode(item)
        fold_item(ledger, item, decoded)
        for scope, reader in readers:
            for row in reader.rows(item, decoded):
                yield scope, row
    if to_s is not None:
        fold_item(ledger, ClockMark(to_s, end=True))  # a window ends where it was asked to, as in replay
    for scope, reader in readers:
        for row in reader.end():
            yield scope, row
