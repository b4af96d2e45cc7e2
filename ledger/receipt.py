"""Receipt `trnwatch.receipt/1`: what was measured, at which boundary, from which source.

Built from the ledger (pure: the write time is passed in) and written by the session on every exit
path (trnwatch/output.py) as JSON plus a Markdown rendering beside it. Chip, host,
UltraServer and job figures live in separate sections; the Markdown states each section's
boundary in words so an UltraServer figure never passes for a chip's, and the evidence state
(live / replayed / simulated) heads both files.
"""

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trnwatch import __version__
from trnwatch.ledger.counters import Reading
from trnwatch.ledger.hosts import HostState
from trnwatch.ledger.ledger import Evidence, Ledger
from trnwatch.outside import clean, json_safe

SCHEMA = "trnwatch.receipt/1"

ExitReason = Literal["eof", "duration", "interrupt", "sigterm", "sighup", "quit", "terminal-lost", "error"]

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
    gaps: int  # silences longer than the stale threshold
    gap_seconds: float
    ended: bool
    end_error: str | None
    simulated: bool
    # Passive job logs only: the log profile reading it, and lines no rule matched (not errors).
    log_profile: str | None = None
    unparsed_lines: int = 0


class HostEntry(_Section):
    host: str
    source: str
    ultraserver: str | None
    ultraserver_from: Literal["config", "report"] | None
    instance_type: str | None
    device_type: str | None
    neuroncore_version: str | None
    lnc: int | None
    chips: int
    cores_per_chip: int | None
    reports: int
    anomalies: dict[str, int]
    group_errors: dict[str, str]


class Ecc(_Section):
    mem_corrected: int | None
    mem_uncorrected: int | None
    sram_corrected: int | None
    sram_uncorrected: int | None


class ChipEntry(_Section):
    host: str
    device: int
    hbm_capacity_bytes: int | None
    hbm_peak_bytes: int | None
    util_mean_pct: float | None
    util_max_pct: float | None
    samples: int
    ecc: Ecc
    ecc_reading: Reading
    ecc_readings: dict[str, dict[str, int]] | None  # both readings, only where they disagree


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


class UltraServerEntry(_Section):
    id: str
    hosts: int
    chips: int
    hbm_capacity_bytes: int | None  # null when any member chip's capacity is unknown
    hbm_peak_sum_bytes: int | None  # sum of member chips' own peaks (not a simultaneous figure)
    util_mean_pct: float | None  # mean of member chips' window means


class OutputFailure(_Section):
    """An output that stopped during the session (the session itself went on)."""

    output: Literal["recording", "snapshot", "receipt", "receipt-markdown"]
    path: str
    error: str
    at: float  # unix seconds


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


class Receipt(_Section):
    # `schema` is a BaseModel attribute, so the field is `schema_` with the JSON key `schema`.
    schema_: str = Field(alias="schema")
    tool: str
    evidence: Evidence
    recorded_evidence: Evidence | None  # for a replay: what the recorded session was
    window: Window
    exit_reason: ExitReason
    written_at: float
    counter_rule: str
    sources: list[SourceEntry]
    hosts: list[HostEntry]
    chips: list[ChipEntry]
    runtimes: list[RuntimeEntry]
    ultraservers: list[UltraServerEntry]
    job: dict[str, Any] | None
    output_failures: list[OutputFailure] = []
    recording: RecordingEntry | None = None
    replay: ReplayEntry | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def to_json(self) -> str:
        # Outside strings keep their exact value, but control and bidi characters are escaped.
        return json_safe(self.model_dump_json(by_alias=True, indent=2)) + "\n"


def receipt_json_schema() -> dict:
    """JSON Schema of the receipt, exported from the model."""
    return Receipt.model_json_schema(by_alias=True)


def _r(value: float | None, places: int = 3) -> float | None:
    return None if value is None else round(value, places)


def build_receipt(ledger: Ledger, exit_reason: ExitReason, recorded_evidence: Evidence | None = None, *,
                  written_at_s: float, output_failures: list[OutputFailure] = (),
                  recording: RecordingEntry | None = None, replay: ReplayEntry | None = None) -> Receipt:
    """Assemble the receipt from the ledger's current state, written at `written_at_s` (wall clock,
    passed in). The job section is judged at the window's end (the last line received), so a
    replay gives the same job figures."""
    job = ledger.job.summary(ledger.last_s) if ledger.job is not None and ledger.last_s is not None else None
    hosts = sorted(ledger.hosts.values(), key=lambda h: h.host_id)
    chips = [_chip_entry(h, c) for h in hosts for c in h.chips]
    start, end = ledger.first_s, ledger.last_s
    return Receipt(
        schema=SCHEMA,
        tool=f"trnwatch {__version__}",
        evidence=ledger.evidence,
        recorded_evidence=recorded_evidence,
        window=Window(start=start, end=end, seconds=round(end - start, 3) if start is not None else 0.0),
        exit_reason=exit_reason,
        written_at=written_at_s,
        counter_rule=COUNTER_RULE,
        sources=[_source_entry(s) for s in sorted(ledger.sources.values(), key=lambda s: s.source_id)],
        hosts=[_host_entry(ledger, h) for h in hosts],
        chips=chips,
        runtimes=[_runtime_entry(h, r) for h in hosts for r in sorted(h.runtimes.values(), key=lambda r: r.order)],
        ultraservers=_ultraserver_entries(ledger),
        job=job,
        output_failures=list(output_failures),
        recording=recording,
        replay=replay,
    )


def _source_entry(s) -> SourceEntry:
    return SourceEntry(
        id=s.source_id, kind=s.kind, reports=s.reports, rejected=sum(s.rejected.values()),
        rejected_by_reason=dict(sorted(s.rejected.items())), last_rejection=s.last_rejection,
        gaps=s.gaps, gap_seconds=round(s.gap_s, 3), ended=s.ended_s is not None,
        end_error=s.end_error, simulated=s.simulated, log_profile=s.log_profile, unparsed_lines=s.unparsed_lines,
    )


def _host_entry(ledger: Ledger, h: HostState) -> HostEntry:
    us = ledger.ultraserver_of(h)
    configured = h.host_id in ledger.ultraserver_overrides or h.source_id in ledger.ultraserver_overrides
    return HostEntry(
        host=h.host_id, source=h.source_id, ultraserver=us,
        ultraserver_from=None if us is None else ("config" if configured else "report"),
        instance_type=h.instance_type, device_type=h.device_type, neuroncore_version=h.neuroncore_version,
        lnc=h.lnc, chips=len(h.chips), cores_per_chip=h.cores_per_chip, reports=h.reports,
        anomalies=dict(h.anomalies), group_errors=dict(h.group_errors),
    )


def _chip_entry(h: HostState, c) -> ChipEntry:
    totals = c.ecc.totals()
    reading = c.ecc.reading
    return ChipEntry(
        host=h.host_id, device=c.index, hbm_capacity_bytes=c.hbm_capacity_bytes, hbm_peak_bytes=c.hbm_peak_bytes,
        util_mean_pct=_r(c.util_mean_pct), util_max_pct=_r(c.util_max_pct), samples=c.samples,
        ecc=Ecc(
            mem_corrected=totals.get("mem_ecc_corrected"), mem_uncorrected=totals.get("mem_ecc_uncorrected"),
            sram_corrected=totals.get("sram_ecc_corrected"), sram_uncorrected=totals.get("sram_ecc_uncorrected"),
        ),
        ecc_reading=reading,
        ecc_readings=c.ecc.both_readings() if None in totals.values() else None,
    )


def _runtime_entry(h: HostState, r) -> RuntimeEntry:
    reading = r.executions.reading
    totals = r.executions.totals()
    return RuntimeEntry(
        host=h.host_id, pid=r.pid, tag=r.tag, cores=list(r.cores),
        executions=ExecutionCounts(
            reading=reading, reports=r.executions.reports, totals=totals,
            readings=r.executions.both_readings() if None in totals.values() else None,
        ),
        total_latency_s=r.total_latency_s, loaded_models=[m.name for m in r.loaded_models],
        group_errors=dict(r.group_errors),
    )


def _ultraserver_entries(ledger: Ledger) -> list[UltraServerEntry]:
    out = []
    for us, hosts in sorted(ledger.ultraservers().items()):
        chips = [c for h in hosts for c in h.chips]
        capacities = [c.hbm_capacity_bytes for c in chips]
        peaks = [c.hbm_peak_bytes for c in chips]
        means = [c.util_mean_pct for c in chips if c.util_mean_pct is not None]
        out.append(UltraServerEntry(
            id=us, hosts=len(hosts), chips=len(chips),
            hbm_capacity_bytes=None if None in capacities else sum(capacities),
            hbm_peak_sum_bytes=None if None in peaks else sum(peaks),
            util_mean_pct=_r(sum(means) / len(means)) if means else None,
        ))
    return out


# --- rendering and writing ----------------------------------------------------------------------


def _gib(n: int | None) -> str:
    return "unknown" if n is None else f"{n / 2**30:.2f} GiB"


def _pct(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.1f}%"


def _md_text(s: object) -> str:
    """Outside strings in Markdown: no markup, no control characters, no table breaks."""
    return clean(s).replace("\\", "\\\\").replace("|", "\\|").replace("`", "'").replace("<", "&lt;")


def _md_recording(r: Receipt) -> list[str]:
    lines = []
    if r.recording is not None:
        rec = r.recording
        stopped = datetime.fromtimestamp(rec.stopped_at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if rec.error else ""
        state = (f"**stopped** at {stopped} UTC: {_md_text(rec.error)}"
                 if rec.error else "to the end")
        lines.append(f"- Recording: {_md_text(rec.path)}, {len(rec.files)} file(s), {rec.frames} frames, "
                     f"{rec.bytes} bytes; recorded {state}")
    if r.replay is not None:
        p = r.replay
        window = "whole recording" if p.window_from is None and p.window_to is None else (
            f"window {p.window_from if p.window_from is not None else 'start'} .. "
            f"{p.window_to if p.window_to is not None else 'end'} (unix s)")
        skipped = ", ".join(f"{n} {reason}" for reason, n in p.frames_skipped.items()) or "none"
        lines.append(f"- Replayed: {_md_text(p.recording)} ({p.schema_}), {window}; {p.frames_read} frames read, "
                     f"skipped: {skipped}")
    return lines


def render_markdown(r: Receipt) -> str:
    """The receipt for people: same figures, each section with its boundary in words."""
    n_chips, n_hosts, n_us = len(r.chips), len(r.hosts), len(r.ultraservers)
    lines = [
        f"# trnwatch receipt ({r.evidence.upper()})",
        "",
        f"- Schema: `{SCHEMA}`; tool: {r.tool}",
        f"- Evidence: **{r.evidence}**" + (f" (recorded session was {r.recorded_evidence})" if r.recorded_evidence else ""),
        f"- Window: {r.window.seconds:.1f} s of data, first to last line received; exit reason: {r.exit_reason}",
        f"- Coverage: {n_chips} chips on {n_hosts} hosts; {n_us} UltraServer(s) configured or reported",
        *[f"- Output failed: {f.output} to {_md_text(f.path)}: {_md_text(f.error)} (the session went on without it)"
          for f in r.output_failures],
        *_md_recording(r),
        "",
        "## Sources",
        "",
        f"Boundary: {len(r.sources)} stream(s); counts are per stream.",
        "",
        "| source | kind | reports | rejected | gaps | state |",
        "|---|---|---|---|---|---|",
    ]
    for s in r.sources:
        reasons = ", ".join(f"{k} {v}" for k, v in s.rejected_by_reason.items())
        state = "lost: " + _md_text(s.end_error) if s.end_error else ("ended" if s.ended else "open at exit")
        lines.append(f"| {_md_text(s.id)} | {s.kind}{' (simulated)' if s.simulated else ''} | {s.reports} | "
                     f"{s.rejected}{f' ({reasons})' if reasons else ''} | {s.gaps} ({s.gap_seconds:.1f} s) | {state} |")
    lines += ["", "## Hosts", "", f"Boundary: {n_hosts} host(s), one neuron-monitor stream each; host figures, not chip figures.", "",
              "| host | UltraServer | instance type | device type | chips | reports |", "|---|---|---|---|---|---|"]
    for h in r.hosts:
        us = f"{_md_text(h.ultraserver)} ({h.ultraserver_from})" if h.ultraserver else "none"
        lines.append(f"| {_md_text(h.host)} | {us} | {_md_text(h.instance_type or '?')} | {_md_text(h.device_type or 'unknown')} | "
                     f"{h.chips} | {h.reports} |")
    lines += ["", "## Chips", "",
              f"Boundary: each row is one chip ({n_chips} chips on {n_hosts} host(s)); not an UltraServer figure. "
              "HBM is the sum of the per-core memory categories over all runtimes; utilisation is the mean over the chip's "
              "logical cores, idle cores counting 0.", "",
              "| host | chip | HBM peak | HBM capacity | util mean | util max | samples | ECC mem c/u | ECC sram c/u | ECC reading |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for c in r.chips:
        e = c.ecc
        lines.append(f"| {_md_text(c.host)} | {c.device} | {_gib(c.hbm_peak_bytes)} | {_gib(c.hbm_capacity_bytes)} | "
                     f"{_pct(c.util_mean_pct)} | {_pct(c.util_max_pct)} | {c.samples} | {e.mem_corrected}/{e.mem_uncorrected} | "
                     f"{e.sram_corrected}/{e.sram_uncorrected} | {c.ecc_reading} |")
    lines += ["", "## Runtimes", "", "Boundary: one Neuron process each (keyed by pid and tag); execution counts are per process.", "",
              "| host | pid | tag | cores | reading | completed | errors |", "|---|---|---|---|---|---|---|"]
    for rt in r.runtimes:
        t = rt.executions.totals
        errors = [v for k, v in t.items() if k.startswith("error.")]
        err_total = None if None in errors else sum(errors)
        lines.append(f"| {_md_text(rt.host)} | {'n/a' if rt.pid is None else rt.pid} | {_md_text(rt.tag)} | {len(rt.cores)} | {rt.executions.reading} | "
                     f"{t.get('status.completed')} | {err_total} |")
    lines += ["", "## UltraServers", ""]
    if r.ultraservers:
        lines += ["Boundary: each row aggregates the hosts mapped to that UltraServer; these are UltraServer figures, "
                  "never a property of any one chip. HBM peak sum adds each chip's own peak (not a simultaneous total).", "",
                  "| UltraServer | hosts | chips | HBM capacity | HBM peak sum | util mean of chip means |", "|---|---|---|---|---|---|"]
        for u in r.ultraservers:
            lines.append(f"| {_md_text(u.id)} | {u.hosts} | {u.chips} | {_gib(u.hbm_capacity_bytes)} | {_gib(u.hbm_peak_sum_bytes)} | "
                         f"{_pct(u.util_mean_pct)} |")
    else:
        lines.append("No host was mapped to an UltraServer (no `--ultraservers` file, no `ultraserver_id` in reports): "
                     "no UltraServer figure is given.")
    lines += ["", "## Job", ""]
    lines += ["No job telemetry was connected: no step, throughput or collective figures."] if r.job is None else _job_markdown(r.job)
    lines += ["", "## Counter semantics", "", r.counter_rule, ""]
    # Every line passes the sanitiser, whatever field it was built from (one outside string never
    # carries a control character or a line break into the file).
    return "\n".join(clean(line) for line in lines)


def _seconds(p: dict | None) -> str:
    if not p or p.get("p50") is None:
        return "n/a"
    return ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in p.items() if v is not None)


def _job_markdown(job: dict[str, Any]) -> list[str]:
    ranks = job["ranks"]
    lines = [f"Boundary: the whole job: {ranks['seen']} rank(s) seen of world size {ranks['world_size']}, "
             f"on {ranks['hosts']} host(s); job figures, not chip or UltraServer figures.", "",
             f"- Verdict at the window's end: **{job['verdict']}** ({_md_text(job['reason'])})",
             f"- Ranks: {ranks['running']} running, {ranks['finished']} finished, {ranks['failed']} failed, {ranks['dead']} dead"]
    if job.get("model"):
        p = job["parallel"]
        lines += [f"- Model: {_md_text(job['model']['name'])}, {job['model']['params']:,} parameters, {_md_text(job['precision'])}, "
                  f"backend {job['backend']}",
                  f"- Batch: global {job['global_batch']}, micro {job['micro_batch']}, sequence {job['seq_len']}; "
                  f"parallel tp {p['tp']} pp {p['pp']} dp {p['dp']}"]
    if job.get("cold_compile_s") is not None:
        lines.append(f"- Cold compile: {job['cold_compile_s']:.1f} s over {job['cold_compiles']} compile(s)")
    t = job.get("throughput")
    lines.append("- Throughput: no steady steps observed" if t is None else
                 f"- Throughput: {t['tokens_per_s'] or 0:,.0f} tokens/s (rank {t['from_rank']}, {t['steps_in_window']} steps); "
                 f"step time {_seconds(t['step_time_s'])}")
    for source, profile in job.get("log_profiles", {}).items():
        lines.append(f"- Passive log {_md_text(source)}: read with log profile {_md_text(profile or 'none detected')}")
    coll = job.get("collectives")
    if isinstance(coll, dict):
        for op, c in coll.items():
            lines.append(f"- Collective {_md_text(op)}: {c['count']} timed, latency {_seconds(c['latency_s'])}")
    else:
        lines.append(f"- Collectives: {_md_text(coll)}")
    for r in job.get("restarts", []):
        lines.append(f"- Restart {r['restart']} from step {r['from_step']}: first step after "
                     f"{'n/a' if r['restart_to_first_step_s'] is None else format(r['restart_to_first_step_s'], '.1f') + ' s'}")
    lines.append(f"- Failures: {len(job.get('failures', []))}; stalls: {len(job.get('stalls', []))}")
    return lines
