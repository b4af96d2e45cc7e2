"""The receipt for people: headline first, then the boundary, the job, goodput, and each scope.

Same figures as the JSON. Every absent figure reads "unknown" or "n/a", never a Python `None`;
outside strings are plain text (no markup, no control characters, no table breaks). Sources are
summarised by kind with only the troubled ones listed. The SVG timeline, when written, sits beside
the Markdown and is linked from it.
"""

import time
from collections import Counter
from datetime import UTC, datetime

from trnwatch.collectors.limits import MAX_HOSTS
from trnwatch.collectors.scheduler import KubernetesJob, job_words
from trnwatch.ledger import units
from trnwatch.ledger.incidents import incident_words, site_words, worst_first
from trnwatch.ledger.job_summary import Percentiles
from trnwatch.ledger.lag import BEHIND_AFTER_S, behind_words
from trnwatch.ledger.ledger import HOST_FORGET_AFTER_S, source_delivered
from trnwatch.ledger.receipt import SCHEMA, EfaEntry, Receipt
from trnwatch.ledger.runtimes import is_execution_error
from trnwatch.outside import clean

UNKNOWN = "unknown"


def _md_text(s: object) -> str:
    """Outside strings in Markdown: no markup (no emphasis, code, HTML, link or image: `[` and `]`
    escaped; `&` as `&amp;`, so an entity from outside reads as typed), no control characters, no
    table breaks."""
    text = clean(s).replace("\\", "\\\\").replace("|", "\\|").replace("`", "'").replace("*", "\\*")
    return text.replace("[", "\\[").replace("]", "\\]").replace("&", "&amp;").replace("<", "&lt;")


def _v(value: object, unit: str = "") -> str:
    """A value or "unknown", never `None`."""
    if value is None:
        return UNKNOWN
    if isinstance(value, float):
        value = f"{value:,.3f}".rstrip("0").rstrip(".")
    elif isinstance(value, int) and not isinstance(value, bool):
        value = f"{value:,}"
    else:
        value = _md_text(value)
    return f"{value}{unit}"


def _gib(n: int | None) -> str:
    return UNKNOWN if n is None else units.gib(n, 2)


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.1f} ms"


def _secs(s: float | None) -> str:
    return "n/a" if s is None else f"{s:.1f} s"


def _day(t: float | None) -> str:
    return "n/a" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _percentiles_ms(p: Percentiles | None) -> str:
    if p is None:
        return "n/a"
    shown = [f"{k} {_ms(v)}" for k, v in p if v is not None]
    return ", ".join(shown) if shown else "n/a"


EVIDENCE_WORDS = {
    "live": "read from the hosts' own telemetry during the session",
    "replayed": "read back from a recording, not observed live",
    "simulated": "trnwatch's simulator produced the data; no hardware was measured",
}
# Where each boundary field comes from when the receipt does not say otherwise (inferred_from).
BOUNDARY_SOURCES = {
    "scope": "job telemetry connected or not, and the hosts' UltraServer membership",
    "ranks": "world_size in run_start",
    "instance_type": "instance_info of the hosts' reports",
    "device_type": "neuron_hardware_info of the hosts' reports",
    "lnc": "lnc in run_start",
    "compiler_version": "versions in run_start",
    "framework_version": "versions in run_start",
    "model": "model in run_start",
    "params": "model in run_start",
    "precision": "precision in run_start",
    "global_batch": "run_start",
    "micro_batch": "run_start",
    "seq_len": "run_start",
    "sequence_lengths": "seq_len of the timeline rank's steps",
    "parallel": "parallel in run_start",
    "evidence": "the session's sources (the simulator marks its data)",
    "chips": "chips in the hosts' neuron_hardware_info",
    "hosts": "device streams",
}


def boundary_words(r: Receipt) -> str:
    b = r.boundary
    where = {
        "job": "the whole job",
        "cluster": "a cluster",
        "ultraserver": "one UltraServer",
        "host": "one host",
        "hosts": "hosts in no UltraServer",
        "none": "nothing (no data)",
    }[b.scope]
    parts = [f"{_v(b.ranks)} rank(s)"] if b.scope == "job" else []
    parts += [f"{_v(b.chips)} chip(s)", f"{_v(b.hosts)} host(s)", f"{_v(b.ultraservers)} UltraServer(s)"]
    kit = ", ".join(x for x in (b.instance_type, b.device_type) if x)
    text = f"{where}: {', '.join(parts)}; fabric {_v(b.fabric)}"
    if kit:
        text += f"; {_md_text(kit)}"
    if b.lnc is not None:
        text += f", LNC {b.lnc}"
    if b.scheduler is not None:
        text += f"; {_md_text(job_words(b.scheduler))}"
    return text


def _headline(r: Receipt) -> list[str]:
    job = r.job
    lines = [f"# trnwatch receipt: {r.evidence.upper()}", ""]
    lines += _nothing_measured(r)
    if job is None:
        lines.append("**No job telemetry was connected**: device figures only (no verdict, throughput or goodput).")
    else:
        verdict = f"**Verdict: {job.verdict.upper()}** ({_md_text(job.reason)})"
        if job.suspects:
            s = job.suspects[0]
            place = (("pid", s.pid), ("host", s.host), ("chip", s.chip), ("core", s.core), ("region", s.region))
            where = ", ".join(f"{k} {v if k == 'pid' else _v(v)}" for k, v in place if v is not None)
            verdict += f"; culprit: rank {_v(s.rank)}" + (f" ({where})" if where else "")
        elif job.verdict not in ("steady", "finished"):
            verdict += "; culprit: no rank named"
        lines.append(f"- {verdict}")
    lines += _incident_headline(r)
    steady = r.segments.steady if r.segments else None
    if steady is not None:
        lines.append(
            f"- **Steady throughput: {_v(steady.tokens_per_s)} tokens/s** over steps {steady.first_step}-"
            f"{steady.last_step} ({steady.steps} steps, {units.clock(steady.start)}-{units.clock(steady.end)} UTC, rank "
            f"{steady.from_rank}{', boundary inferred: no phases emitted' if steady.inferred else ''}); "
            f"step time {_percentiles_ms(steady.step_time_s)}"
        )
    elif job is not None:
        lines.append("- **Steady throughput: none**: no steady step was observed")
    if r.goodput is not None:
        g = r.goodput
        worst = sorted(((v, k) for k, v in g.badput_s if v > 0), reverse=True)[:3]
        lost = ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for v, k in worst) or "none"
        lines.append(
            f"- **Goodput: {units.pct(g.goodput_pct)}** of {g.window.seconds:.1f} s productive; largest badput: {lost}"
        )
    lines.append(
        f"- **Evidence: {r.evidence}**: {EVIDENCE_WORDS[r.evidence]}"
        + (f" (the recorded session was {r.recorded_evidence})" if r.recorded_evidence else "")
    )
    lines.append(f"- **Boundary**: {boundary_words(r)}")
    lines += [
        f"- Output failed: {f.output} to {_md_text(f.path)}: {_md_text(f.error)} (the session went on without it)"
        for f in r.output_failures
    ]
    lines += _recording_lines(r)
    lines += [
        "",
        f"Window: {r.window.seconds:.1f} s of data, {_day(r.window.start)} to {units.clock(r.window.end)} UTC "
        f"(first to last line received); exit reason: {r.exit_reason}. Schema `{SCHEMA}`; {_md_text(r.tool)}.",
    ]
    return lines


GENERIC_WORDS = (
    "read with the generic profile (no framework detected: steps, loss and step times from hand-written "
    "lines; a framework's profile or the emitter gives more, docs/job-telemetry.md)"
)


def _nothing_measured(r: Receipt) -> list[str]:
    """The first headline line when no source delivered anything (the rule of
    Ledger.nothing_delivered, over the receipt's sources): nothing below it was measured, and each
    source says why."""
    if any(source_delivered(s.reports, s.rejected, s.unparsed_lines, s.kind, s.state) for s in r.sources):
        return []
    why = "; ".join(f"{_md_text(s.id)}: {_md_text(s.failed or f'no line ({s.state})')}" for s in r.sources)
    return [
        "- **Nothing was measured**: no source delivered a line"
        + (f" ({why})" if why else " (no source appeared: no job file or log was found)")
        + "; the lines below describe an empty session"
    ]


HEADLINE_INCIDENTS = 3


def _incident_headline(r: Receipt) -> list[str]:
    """The worst incidents, after the verdict: "uncorrected ECC on sim-us-07/2 at 14:24:50 (critical)"."""
    if not r.incidents:
        return [
            "- **Incidents: none**"
            + (f" kept ({r.incidents_dropped} dropped past the bound)" if r.incidents_dropped else "")
        ]
    worst = worst_first(r.incidents)
    shown = [
        f"{_md_text(incident_words(i))} ({i.worst_severity}{', open at exit' if i.state == 'open' else ''})"
        for i in worst[:HEADLINE_INCIDENTS]
    ]
    more = len(worst) - HEADLINE_INCIDENTS
    tail = f"; {more} more" if more > 0 else ""
    return [f"- **Incidents: {len(worst)}**: " + "; ".join(shown) + tail + " (see Incidents)"]


def _incidents_section(r: Receipt) -> list[str]:
    lines = ["", "## Incidents", ""]
    if not r.incidents:
        return lines + ["No finding was seen during the session."]
    lines += [
        "Every finding of the session, most severe first; times are UTC, the site links to the Chips table "
        "by instance id and chip.",
        "",
        "| # | incident | severity | site | instance id | first | last | state | evidence |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i in worst_first(r.incidents):
        changes = " -> ".join(c.label for c in i.changes if c.change in ("opened", "escalated", "eased"))
        state = "open at exit" if i.state == "open" else f"cleared {units.clock(i.cleared)}"
        lines.append(
            f"| {i.id} | {_md_text(i.title)} ({_md_text(changes)}) | {i.worst_severity} | {_md_text(site_words(i.site))} "
            f"| {_v(i.site.instance_id)} | {units.clock(i.first)} | {units.clock(i.last)} | {state} | {_md_text(i.evidence.what)} |"
        )
    if r.incidents_dropped:
        lines += ["", f"{r.incidents_dropped} incident(s) dropped past the bound of the session's log."]
    return lines


def _recording_lines(r: Receipt) -> list[str]:
    lines = []
    if r.recording is not None:
        rec = r.recording
        stopped = (
            datetime.fromtimestamp(rec.stopped_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
            if rec.error and rec.stopped_at is not None
            else ""
        )
        state = f"**stopped** at {stopped} UTC: {_md_text(rec.error)}" if rec.error else "to the end"
        lines.append(
            f"- Recording: {_md_text(rec.path)}, {len(rec.files)} file(s), {rec.frames} frames, "
            f"{rec.bytes} bytes; recorded {state}"
        )
    if r.replay is not None:
        p = r.replay
        window = (
            "whole recording"
            if p.window_from is None and p.window_to is None
            else (
                f"window {p.window_from if p.window_from is not None else 'start'} .. "
                f"{p.window_to if p.window_to is not None else 'end'} (unix s)"
            )
        )
        skipped = ", ".join(f"{n} {reason}" for reason, n in p.frames_skipped.items()) or "none"
        lines.append(
            f"- Replayed: {_md_text(p.recording)} ({p.schema_}), {window}; {p.frames_read} frames read, "
            f"skipped: {skipped}"
        )
    return lines


def _boundary_section(r: Receipt) -> list[str]:
    notes = r.boundary.inferred_from
    lines = [
        "",
        "## Boundary",
        "",
        "What `trnwatch compare` requires equal before comparing two receipts.",
        "",
        "| field | value | how it is known |",
        "|---|---|---|",
    ]
    for key, value in r.boundary:
        if key in ("inferred_from", "versions", "scheduler"):
            continue
        lines.append(f"| {key} | {_v(value)} | {_md_text(notes.get(key, BOUNDARY_SOURCES.get(key, 'reported')))} |")
    job = r.boundary.scheduler
    if isinstance(job, KubernetesJob):
        how = f"--k8s-job: kubectl get pods and nodes at start, pods labelled {', '.join(job.labels)}"
    else:
        how = "SLURM_JOB_ID, SLURM_JOB_NAME, SLURM_JOB_NODELIST at start"
    lines += [
        "",
        "Scheduler job (shown by compare, not required equal): "
        + (
            "none: not inside a Slurm allocation (no SLURM_JOB_ID in trnwatch's environment) and no --k8s-job"
            if job is None
            else f"{_md_text(job_words(job))} ({_md_text(how)})"
        )
        + ".",
    ]
    return lines + (_pods_table(job) if isinstance(job, KubernetesJob) else [])


def _pods_table(job: KubernetesJob) -> list[str]:
    """Each pod of a Kubernetes job: where Kubernetes put it and which host and ranks it was matched to."""
    lines = ["", "| pod | phase | node | instance | host | ranks | note |", "|---|---|---|---|---|---|---|"]
    for p in job.pods:
        note = p.problem or ("" if p.host else "no host of the telemetry has its node's names")
        cells = (p.name, p.phase, p.node, p.instance_id, p.host, p.ranks, note)
        lines.append("| " + " | ".join(_md_text(c) if c else "-" for c in cells) + " |")
    if job.pods_dropped:
        lines += ["", f"{job.pods_dropped} pod(s) of the job not listed (past the bound or unreadable)."]
    if job.ranks_unmapped:
        lines += ["", f"Ranks on no pod's host: {_md_text(job.ranks_unmapped)}."]
    return lines


def _job_section(r: Receipt) -> list[str]:
    job = r.job
    lines = ["", "## Job", ""]
    if job is None:
        return lines + ["No job telemetry was connected: no step, throughput or collective figures."]
    ranks = job.ranks
    lines += [
        f"Boundary: the whole job: {_v(ranks.seen)} rank(s) seen of world size "
        f"{_v(ranks.world_size)}, on {_v(ranks.hosts)} host(s); job figures, not chip or "
        "UltraServer figures.",
        "",
        f"- Run {_md_text(job.run)}; ranks: {_v(ranks.running)} running, "
        f"{_v(ranks.finished)} finished, {_v(ranks.failed)} failed, {_v(ranks.dead)} dead",
    ]
    model, parallel = job.model, job.parallel
    lines.append(
        f"- Model {_v(None if model is None else model.name)}, {_v(None if model is None else model.params)} "
        f"parameters, precision {_v(job.precision)}, backend {_v(job.backend)}"
    )
    lines.append(
        f"- Batch: global {_v(job.global_batch)}, micro {_v(job.micro_batch)}, sequence "
        f"{_v(job.seq_len)}; parallel " + (UNKNOWN if parallel is None else " ".join(f"{k} {v}" for k, v in parallel))
    )
    versions = job.versions or {}
    lines.append(
        "- Versions: "
        + (", ".join(f"{_md_text(k)} {_md_text(v)}" for k, v in sorted(versions.items())) or "none reported")
    )
    per_device = None if job.throughput is None else job.throughput.tokens_per_s_per_device
    if per_device is not None:
        lines.append(
            f"- The log reports {per_device:,.0f} tokens/s per device (TorchTitan's tps, median over the "
            "steady steps): a per-device figure, not the job's rate"
        )
    for source, profile in job.log_profiles.items():
        how = (
            GENERIC_WORDS
            if profile == "generic"  # collectors/log_profiles_generic.py (not imported: the ledger reads no I/O)
            else f"read with log profile {_md_text(profile or 'none detected')}"
        )
        lines.append(f"- Passive log {_md_text(source)}: {how}")
    seg = r.segments
    if seg is not None and seg.cold_compile is not None:
        c = seg.cold_compile
        lines.append(
            f"- Cold compile: {_secs(c.seconds)} over {c.compiles} compile(s), {units.clock(c.start)}-"
            f"{units.clock(c.end)} UTC; {c.cache_hits} persistent-cache hit(s)"
        )
    saves = job.checkpoint_saves
    lines.append(
        f"- Checkpoint saves: {_v(saves.count)}"
        + (
            f", save time {', '.join(f'{k} {_secs(v)}' for k, v in saves.save_s if v is not None)}"
            if saves.count
            else ""
        )
    )
    for rs in seg.restarts if seg else []:
        lines.append(
            f"- Restart {rs.restart}: from the checkpoint of step {_v(rs.checkpoint_step)}, load "
            f"{_secs(rs.load_s)}, first step after {_secs(rs.time_to_first_step_s)}, {_v(rs.steps_lost)} "
            "step(s) lost"
        )
    if isinstance(job.collectives, dict):
        for op, entry in job.collectives.items():
            lines.append(
                f"- Collective {_md_text(op)}: {entry.count:,} timed, latency {_percentiles_ms(entry.latency_s)}"
            )
    else:
        lines.append(f"- Collectives: {_md_text(job.collectives)}")
    skew = job.wait_skew
    if skew:
        lines.append(
            f"- Wait skew: rank {skew.least_waiting_rank} waits least, {_ms(skew.skew_s)} per step less "
            f"than the others' median ({'a straggler' if skew.slow else 'within the straggler threshold'})"
        )
    else:
        lines.append("- Wait skew: n/a (fewer than two ranks with steady wait data)")
    fr = r.failure_rate
    lines.append(
        f"- Failures: {fr.rank_failures} rank failure(s) ({_v(fr.rank_failures_per_hour)}/h), "
        f"{fr.restarts} restart(s) ({_v(fr.restarts_per_hour)}/h); stalls: {len(job.stalls)}"
    )
    for f in job.failures[:5]:
        what = f.error or f"run ended {f.run_end}"
        lines.append(f"  - rank {f.rank} at {units.clock(f.ts)} UTC: {_md_text(what)}")
    warnings = job.warnings
    if warnings.count:
        lines.append(f"- Warnings (non-fatal, never a failure): {warnings.count} on {warnings.ranks} rank(s)")
        for w in warnings.latest[-3:]:
            lines.append(f"  - rank {w.rank} at {units.clock(w.ts)} UTC: {_md_text(w.message)}")
    for st in job.stalls[:5]:
        who = ", ".join(str(s.rank) for s in st.suspects)
        lines.append(
            f"  - stall from {units.clock(st.begin_ts)} UTC for {_secs(st.duration_s)}"
            + (f", suspects rank {who}" if who else "")
        )
    if job.processes:
        lines += [
            "",
            "Rank processes on this host (psutil, every 3 s):",
            "",
            "| rank | pid | host | state | for | CPU | RSS | tied by |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for proc in job.processes:
            cpu = UNKNOWN if proc.cpu_pct is None else f"{proc.cpu_pct:.0f}%"
            lines.append(
                f"| {proc.rank} | {proc.pid} | {_md_text(proc.host)} | {proc.state} | {_secs(proc.state_for_s)} "
                f"| {cpu} | {_gib(proc.rss_bytes)} | {proc.via} |"
            )
    if r.sequence_lengths is not None:
        s = r.sequence_lengths
        lines.append(
            f"- Sequence lengths over {s.steps} step(s): min {s.min}, p50 {s.p50}, p90 {s.p90}, max {s.max}, "
            f"mean {s.mean:.1f}"
        )
    if job.phases:
        lines += [
            "",
            "Phase timeline (lowest rank):",
            "",
            "| phase | begin (UTC) | end (UTC) | duration |",
            "|---|---|---|---|",
        ]
        for p in job.phases:
            end = "open" if p.end_ts is None else units.clock(p.end_ts)
            lines.append(f"| {_md_text(p.phase)} | {units.clock(p.begin_ts)} | {end} | {_secs(p.duration_s)} |")
    return lines


def _goodput_section(r: Receipt, svg_name: str | None) -> list[str]:
    lines = ["", "## Goodput", ""]
    g = r.goodput
    if g is None:
        lines.append("n/a: no job telemetry, so no step time to call productive.")
    else:
        lines += [
            f"Window: the job's own clock, {units.clock(g.window.start)} to {units.clock(g.window.end)} UTC "
            f"({g.window.seconds:.1f} s), rank {_v(g.from_rank)}; the parts sum to it.",
            "",
            "| part | seconds | share |",
            "|---|---|---|",
            f"| productive step time | {g.productive_s:.1f} | {units.pct(g.goodput_pct)} |",
        ]
        for cause, seconds in g.badput_s:
            share = 100 * seconds / g.window.seconds if g.window.seconds > 0 else None
            lines.append(f"| badput: {cause.replace('_', ' ')} | {seconds:.1f} | {units.pct(share)} |")
        lines += ["", f"Method: {g.method} Late threshold at the end: {g.late_threshold_s:.1f} s."]
    if svg_name:
        lines += [
            "",
            f"![throughput, mean utilisation and HBM over the window]({svg_name})",
            "",
            f"[{svg_name}]({svg_name}): tokens/s, mean chip utilisation and HBM fill over the window; phases "
            "shaded, stalls marked.",
        ]
    return lines


def _kernel_log_section(r: Receipt) -> list[str]:
    k = r.kernel_log
    if k is None:
        return []
    driver = sum(k.driver_lines.values())
    lines = [
        "",
        "## Kernel log",
        "",
        f"{len(k.hardware_errors)} hardware error(s) (NEURON_HW_ERR lines); {driver:,} other Neuron driver "
        "line(s), counted, not shown.",
    ]
    if k.hardware_errors:
        lines += ["", "| error | action | host | chip | nc-id | lines | first (UTC) |", "|---|---|---|---|---|---|---|"]
        for e in k.hardware_errors:
            host = e.host or e.hostname or e.instance_id
            lines.append(
                f"| {_md_text(e.error_type)} | {_md_text(_v(e.action))} | {_md_text(_v(host))} | {_v(e.chip)} | "
                f"{_v(e.nc_id)} | {e.lines} | {units.clock(e.first)} |"
            )
    return lines


def _sources_section(r: Receipt) -> list[str]:
    by_kind: dict[str, list] = {}
    for s in r.sources:
        by_kind.setdefault(s.kind, []).append(s)
    lines = [
        "",
        "## Sources",
        "",
        f"Boundary: {len(r.sources)} stream(s), summarised by kind; counts are per stream.",
        "",
        "| kind | streams | reports | rejected | gaps | ended | failed | simulated |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, group in sorted(by_kind.items()):
        lines.append(
            f"| {_md_text(kind)} | {len(group)} | {sum(s.reports for s in group):,} | "
            f"{sum(s.rejected for s in group):,} | {sum(s.gaps for s in group)} "
            f"({sum(s.gap_seconds for s in group):.1f} s) | {sum(1 for s in group if s.ended)} | "
            f"{sum(1 for s in group if s.failed or s.end_error)} | {sum(1 for s in group if s.simulated)} |"
        )
    troubled = [s for s in r.sources if s.rejected or s.rejected_fields or s.gaps or s.end_error or s.failed]
    if troubled:
        lines += [
            "",
            "Troubled streams:",
            "",
            "| source | kind | reports | rejected | fields rejected | gaps | state |",
            "|---|---|---|---|---|---|---|",
        ]
        for s in troubled:
            reasons = ", ".join(f"{k} {v}" for k, v in s.rejected_by_reason.items())
            failed = s.failed or s.end_error
            state = "failed: " + _md_text(failed) if failed else ("ended" if s.ended else "open at exit")
            lines.append(
                f"| {_md_text(s.id)} | {_md_text(s.kind)} | {s.reports} | {s.rejected}"
                f"{f' ({_md_text(reasons)})' if reasons else ''} | {sum(s.rejected_fields.values())} | "
                f"{s.gaps} ({s.gap_seconds:.1f} s) | {state} |"
            )
    else:
        lines += ["", "No stream had rejected lines, gaps or errors."]
    return lines


def _hosts_section(r: Receipt) -> list[str]:
    kinds: dict[tuple, int] = {}
    for h in r.hosts:
        key = (h.instance_type or UNKNOWN, h.device_type or UNKNOWN, h.lnc)
        kinds[key] = kinds.get(key, 0) + 1
    lines = [
        "",
        "## Hosts",
        "",
        f"Boundary: {len(r.hosts)} host(s), one neuron-monitor stream each; host figures, not chip figures.",
        "",
    ]
    for (itype, dtype, lnc), n in sorted(kinds.items(), key=str):
        lines.append(f"- {n} x {_md_text(itype)} ({_md_text(dtype)}, LNC {_v(lnc)})")
    troubled = [h for h in r.hosts if h.group_errors or h.anomalies]
    for h in troubled:
        problems = [f"{_md_text(k)}: {_md_text(v)}" for k, v in h.group_errors.items()]
        problems += [f"{_md_text(k)} x{v}" for k, v in h.anomalies.items()]
        lines.append(f"- {_md_text(h.host)}: {'; '.join(problems)}")
    unplaced = [h for h in r.hosts if not h.ultraserver]
    if unplaced:
        said = sum(1 for h in unplaced if h.ultraserver_from)
        lines.append(
            f"- {len(unplaced)} host(s) in no UltraServer ({said} by their sysfs, the rest placed by no source)"
        )
    placed = Counter(h.ultraserver_from for h in r.hosts if h.ultraserver)
    if placed:
        lines.append("- UltraServer membership from: " + ", ".join(f"{k} {n}" for k, n in sorted(placed.items())))
    for n, what in ((r.hosts_forgotten, "reports"), (r.sysfs_hosts_forgotten, "sysfs")):
        if n:
            lines.append(
                f"- {n} lost host(s) forgotten to admit new ones (silent {HOST_FORGET_AFTER_S:.0f} s or more in a full table of "
                f"{MAX_HOSTS:,} hosts' {what}): their figures are not in this receipt"
            )
    return lines


def _efa_words(e: EfaEntry | None) -> str:
    if e is None:
        return "n/a"
    errors = units.NA if e.errors_per_s is None else f"{e.errors_per_s:g}"
    hosts = units.plural(e.hosts, "host") if e.members is None else f"{e.hosts}/{units.plural(e.members, 'host')}"
    worst = "" if e.worst_host is None else f", most on {_md_text(e.worst_host)} ({e.worst_errors_per_s:g}/s)"
    return (
        f"tx {units.gbps(e.tx_bytes_per_s)}, rx {units.gbps(e.rx_bytes_per_s)}, {errors} errors/s over {hosts}{worst}"
    )


def _ultraservers_section(r: Receipt) -> list[str]:
    lines = ["", "## UltraServers", ""]
    cluster_efa = [] if r.efa is None else ["", f"EFA (between UltraServers), cluster: {_efa_words(r.efa)}."]
    if not r.ultraservers:
        return (
            lines
            + [
                "No host was placed in an UltraServer (by no `--ultraservers` file, Kubernetes label, sysfs node, "
                "Slurm block or report): no UltraServer figure is given."
            ]
            + cluster_efa
        )
    lines += [
        "Boundary: each row aggregates the hosts mapped to that UltraServer; these are UltraServer figures, "
        "never a property of any one chip. HBM peak sum adds each chip's own peak (not a simultaneous total). "
        "EFA carries only the traffic between UltraServers (sysfs rates of the member hosts, summed).",
        "",
        "| UltraServer | hosts | chips | HBM capacity | HBM peak sum | util mean of chip means | EFA (between UltraServers) |",
        "|---|---|---|---|---|---|---|",
    ]
    for u in r.ultraservers:
        lines.append(
            f"| {_md_text(u.id)} | {u.hosts} | {u.chips} | {_gib(u.hbm_capacity_bytes)} | "
            f"{_gib(u.hbm_peak_sum_bytes)} | {units.pct(u.util_mean_pct)} | {_efa_words(u.efa)} |"
        )
    return lines + cluster_efa


def _ecc(a: int | None, b: int | None) -> str:
    return f"{_v(a)}/{_v(b)}"


def _chips_section(r: Receipt) -> list[str]:
    n_chips, n_hosts = len(r.chips), len(r.hosts)
    lines = [
        "",
        "## Chips",
        "",
        f"Boundary: each row is one chip ({n_chips} chips on {n_hosts} host(s)); not an UltraServer figure. HBM is "
        "the sum of the per-core memory categories over all runtimes; utilisation is the mean over the chip's "
        "logical cores, idle cores counting 0; FLOP/s is the window mean of the cores' reported flops; MFU "
        "divides it by an assumed peak (see the JSON's chips[].peak_flops_per_s); device latency is the latest "
        "report's.",
        "",
        "| host | chip | HBM peak | HBM capacity | util mean | util max | TFLOP/s | MFU | device latency p50/p99 | "
        "ECC mem c/u | ECC sram c/u |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in r.chips:
        e, d = c.ecc, c.device_latency_s
        latency = "n/a" if d is None else f"{_ms(d.p50)} / {_ms(d.p99)}"
        tflops = "n/a" if c.flops_mean_per_s is None else f"{c.flops_mean_per_s / 1e12:.1f}"
        # The name ranks report beside the instance id, so a suspect's host and chip find their row.
        host = _md_text(c.host) if not c.host_name else f"{_md_text(c.host_name)} ({_md_text(c.host)})"
        lines.append(
            f"| {host} | {c.device} | {_gib(c.hbm_peak_bytes)} | {_gib(c.hbm_capacity_bytes)} | "
            f"{units.pct(c.util_mean_pct)} | {units.pct(c.util_max_pct)} | {tflops} | {units.pct(c.mfu_pct)} | {latency} | "
            f"{_ecc(e.mem_corrected, e.mem_uncorrected)} | {_ecc(e.sram_corrected, e.sram_uncorrected)} |"
        )
    return lines


def _runtimes_section(r: Receipt) -> list[str]:
    lines = [
        "",
        "## Runtimes",
        "",
        f"Boundary: {len(r.runtimes)} Neuron process(es), keyed by pid and tag; execution counts are per process.",
        "",
    ]
    fr = r.failure_rate
    lines.append(
        f"- Executions over the window: {_v(fr.executions)}; with errors: {_v(fr.execution_errors)} "
        f"({_v(fr.execution_errors_per_1000)} per 1,000)"
    )
    troubled = [
        rt
        for rt in r.runtimes
        if rt.group_errors or any(v for k, v in rt.executions.totals.items() if is_execution_error(k) and v)
    ]
    for rt in troubled:
        errors = {k: v for k, v in rt.executions.totals.items() if is_execution_error(k) and v}
        text = ", ".join(f"{k} {v}" for k, v in errors.items())
        text += "; ".join(f"{_md_text(k)}: {_md_text(v)}" for k, v in rt.group_errors.items())
        lines.append(f"- {_md_text(rt.host)} pid {_v(rt.pid)} tag {_md_text(rt.tag)}: {text}")
    return lines


INNERMOST_FRAMES = 5  # of each captured stack's main thread, in the Markdown


def _stacks_section(r: Receipt) -> list[str]:
    """Each stack capture: who, when, why, its outcome, and its main thread's innermost frames."""
    if r.stacks is None:
        return []
    lines = ["", "## Stacks (py-spy dump)", ""]
    if r.stacks.dropped:
        lines += [f"{r.stacks.dropped} older capture(s) not kept.", ""]
    for c in r.stacks.captures:
        why = "stall, a waiting rank for contrast" if c.contrast else c.trigger
        incident = f", {_md_text(c.incident)}" if c.incident else ""
        lines.append(
            f"- Rank {c.rank} on {_v(c.host)}, pid {UNKNOWN if c.pid is None else c.pid}, taken {_day(c.started)} in {c.seconds:.1f} s "
            f"({_md_text(why)}{incident}{', native' if c.native else ''}): **{c.outcome}**: {_md_text(c.message)}"
        )
        main = c.main_thread()
        if main is not None:
            lines.append(f"  - thread {_md_text(main.name or main.thread)}, innermost first:")
            for f in main.frames[:INNERMOST_FRAMES]:
                where = f.file if f.line is None else f"{f.file}:{f.line}"
                lines.append(f"    - {_md_text(f.function)} ({_md_text(where)})")
            if len(main.frames) > INNERMOST_FRAMES:
                lines.append(f"    - ... {len(main.frames) - INNERMOST_FRAMES} more frame(s) in the JSON")
        for path in c.dump_files:
            lines.append(f"  - dump in the run directory: {_md_text(path)}")
    return lines


def _monitor_section(r: Receipt) -> list[str]:
    """trnwatch's own lag, when it was behind, paused or left lines unread (else nothing)."""
    m = r.monitor
    if m is None:
        return []
    behind = {k: v for k, v in m.worst_behind_s.items() if v > BEHIND_AFTER_S}
    if not (behind or m.pauses or m.unread_at_exit_bytes):
        return []
    lines = [
        "",
        "## trnwatch itself",
        "",
        "Its own lag, never the job's: ranks and hosts were judged on what it had read.",
        "",
    ]
    for source, seconds in sorted(behind.items(), key=lambda kv: -kv[1]):
        lines.append(f"- {_md_text(behind_words(source, seconds))} at worst")
    if m.pauses:
        lines.append(
            f"- its event loop paused {m.pauses} time(s), {m.paused_s:.1f} s in all (longest {m.longest_pause_s:.1f} s)"
        )
    if m.unread_at_exit_bytes:
        lines.append(
            f"- left unread at exit: {m.unread_at_exit_lines:,} lines ({m.unread_at_exit_bytes:,} bytes) "
            f"in {m.unread_at_exit_sources} file(s); per file under Sources"
        )
    return lines


def render_markdown(r: Receipt, svg_name: str | None = None) -> str:
    """The receipt for people: headline, boundary, job, goodput (with the timeline picture when
    `svg_name` is given), then sources, hosts, UltraServers, runtimes and chips."""
    lines = _headline(r)
    lines += _incidents_section(r)
    lines += _monitor_section(r)
    lines += _boundary_section(r)
    lines += _job_section(r)
    lines += _stacks_section(r)
    lines += _goodput_section(r, svg_name)
    lines += _kernel_log_section(r)
    lines += _sources_section(r)
    lines += _hosts_section(r)
    lines += _ultraservers_section(r)
    lines += _runtimes_section(r)
    lines += _chips_section(r)
    lines += ["", "## Counter semantics", "", r.counter_rule, ""]
    # Every line passes the sanitiser, whatever field it was built from (one outside string never
    # carries a control character or a line break into the file).
    return "\n".join(clean(line) for line in lines)
