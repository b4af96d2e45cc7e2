"""Snapshot `trnwatch.snapshot/1`: the ledger's state at one moment, every scope, as JSON.

A receipt summarises a whole session; a snapshot is what the screen could show right now (latest
figures, freshness, ages), for incident tickets and scripts. It holds every scope whatever is on
screen: sources, UltraServer rollups (fresh hosts only, with their boundary), hosts with their
runtimes, chips with cores, HBM categories and ECC, and the job section when job telemetry is
connected. "now" is the session clock the figures were judged at (for a replay, the replay clock);
both it and the write time are passed in. `snapshot_json` is the one way to turn it into text.
"""

import json
import time
from collections.abc import Sequence
from typing import Any

from trnwatch import __version__
from trnwatch.ledger.findings import finding_record, findings_text
from trnwatch.ledger.hosts import ChipState, HostState, RuntimeState
from trnwatch.ledger.incidents import Incident
from trnwatch.ledger.job_summary import JobSection
from trnwatch.ledger.ledger import Evidence, Ledger
from trnwatch.ledger.rollups import UltraServerRollup, chip_ecc, hbm_fill_pct
from trnwatch.outside import clean, json_safe

SCHEMA = "trnwatch.snapshot/1"


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
) -> dict[str, Any]:
    """Every scope of `ledger` judged at `now_s`; `job` is `JobLedger.summary(now_s)` or None
    when no job telemetry is connected (then the section says so instead of holding zeros).
    `written_at_s` is the wall clock when the snapshot is taken; `incidents` the session's open
    incidents (ledger/incidents.py), most severe first."""
    hosts = sorted(ledger.hosts.values(), key=lambda h: h.host_id)
    read = ledger.read(now_s)
    period_by_source = read.source_periods_s
    return {
        "schema": SCHEMA,
        "tool": f"trnwatch {__version__}",
        "evidence": ledger.evidence,
        "recorded_evidence": recorded_evidence,
        "now": now_s,
        "written_at": written_at_s,
        "findings": [finding_record(f) for f in read.findings],
        "incidents": [i.model_dump(mode="json") for i in incidents],
        "sources": [
            {
                "id": s.source_id,
                "kind": s.kind,
                "state": s.state(now_s, period_by_source.get(s.source_id)),
                "age_s": _age(now_s, s.last_s),
                "reports": s.reports,
                "rejected": sum(s.rejected.values()),
                "rejected_by_reason": dict(sorted(s.rejected.items())),
                "last_rejection": s.last_rejection,
                "end_error": s.end_error,
            }
            for s in sorted(ledger.sources.values(), key=lambda s: s.source_id)
        ],
        "ultraservers": [
            _ultraserver(read.ultraserver(us, members), us) for us, members in sorted(ledger.ultraservers().items())
        ],
        "hosts": [_host(ledger, h, now_s) for h in hosts],
        "chips": [_chip(h, c, now_s) for h in hosts for c in h.chips],
        "job": job.model_dump(mode="json")
        if job is not None
        else {"connected": False, "note": "no job telemetry connected: no job figures"},
    }


def _ultraserver(r: UltraServerRollup, us: str) -> dict[str, Any]:
    return {
        "id": us,
        "boundary": {"hosts": r.hosts_total, "hosts_fresh": r.hosts_fresh, "chips_in_figures": r.chips},
        "hbm_used_bytes": r.hbm_used_bytes,
        "hbm_capacity_bytes": r.hbm_capacity_bytes,
        "util_mean_pct": _r(r.util_mean_pct),
        "util_min_pct": _r(r.util_min_pct),
        "chips_idle": r.chips_idle,
        "chips_with_ecc": r.chips_with_ecc,
        "chips_with_uncorrected_ecc": r.chips_with_uncorrected_ecc,
    }


def _host(ledger: Ledger, h: HostState, now_s: float) -> dict[str, Any]:
    return {
        "host": h.host_id,
        "source": h.source_id,
        "ultraserver": ledger.ultraserver_of(h),
        "fresh": ledger.host_fresh(h, now_s),
        "age_s": _age(now_s, h.last_s),
        "instance_name": h.instance_name,
        "instance_type": h.instance_type,
        "device_type": h.device_type,
        "neuroncore_version": h.neuroncore_version,
        "lnc": h.lnc,
        "chips": len(h.chips),
        "cores_per_chip": h.cores_per_chip,
        "period_s": h.period_s,
        "vcpu_busy_pct": _r(h.vcpu_busy_pct),
        "vcpu_count": h.vcpu_count,
        "memory_used_bytes": h.memory_used_bytes,
        "memory_total_bytes": h.memory_total_bytes,
        "group_errors": dict(h.group_errors),
        "anomalies": dict(h.anomalies),
        "runtimes": [_runtime(h, r) for r in sorted(h.runtimes.values(), key=lambda r: r.order)],
    }


def _runtime(h: HostState, r: RuntimeState) -> dict[str, Any]:
    return {
        "pid": r.pid,
        "tag": r.tag,
        "cores": list(r.cores),
        "in_latest_report": r.last_seen_s == h.last_s,
        "vcpu_user_pct": r.vcpu_user_pct,
        "vcpu_system_pct": r.vcpu_system_pct,
        "device_bytes": r.device_bytes,
        "host_bytes": r.host_bytes,
        "total_latency_s": r.total_latency_s,
        "device_latency_s": r.device_latency_s,
        "executions": {"reading": r.executions.reading, "totals": r.executions.totals()},
        "loaded_models": [
            {"name": m.name, "model_id": m.model_id, "is_running": m.is_running, "devices": list(m.devices)}
            for m in r.loaded_models
        ],
        "error": r.error,
        "group_errors": dict(r.group_errors),
    }


def _chip(h: HostState, c: ChipState, now_s: float) -> dict[str, Any]:
    ecc = chip_ecc(c)
    return {
        "host": h.host_id,
        "device": c.index,
        "util_pct": _r(c.util_pct),
        "util_age_s": _age(now_s, c.util_at_s),
        "hbm_bytes": c.hbm_bytes,
        "hbm_capacity_bytes": c.hbm_capacity_bytes,
        "hbm_age_s": _age(now_s, c.hbm_at_s),
        "hbm_by_category_bytes": dict(c.hbm_by_category_bytes),
        "cores": {
            str(i): {"util_pct": s.util_pct, "flops": s.flops, "physical_util_pct": dict(s.physical_util_pct)}
            for i, s in sorted(c.cores.items())
        },
        "util_mean_pct": _r(c.util_mean_pct),
        "util_max_pct": _r(c.util_max_pct),
        "hbm_peak_bytes": c.hbm_peak_bytes,
        "samples": c.samples,
        "ecc": {
            "reading": c.ecc.reading,
            "totals": c.ecc.totals(),
            "corrected": ecc.corrected,
            "uncorrected": ecc.uncorrected,
        },
    }


def snapshot_json(snap: dict[str, Any]) -> str:
    """The snapshot as JSON text: outside strings exact, control and bidi characters escaped."""
    return json_safe(json.dumps(snap, indent=2, ensure_ascii=False)) + "\n"


# --- plain text ------------------------------------------------------------------------------------


def _gib(n: int | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / 2**40:.2f} TiB" if n >= 2**40 else f"{n / 2**30:.1f} GiB"


def _hms(t_s: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t_s))


def _pct(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.1f}%"


def render_text(snap: dict[str, Any], lowest: int = 5) -> str:
    """The snapshot for a ticket: what it is, each scope with its boundary, what needs a look."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(snap["now"]))
    replay = f" (recorded session: {snap['recorded_evidence']})" if snap["recorded_evidence"] else ""
    chips, hosts = snap["chips"], snap["hosts"]
    fresh_hosts = {h["host"] for h in hosts if h["fresh"]}
    lines = [
        f"trnwatch snapshot ({snap['evidence'].upper()}{replay}) at {when}",
        f"coverage: {len(chips)} chips on {len(hosts)} hosts ({len(fresh_hosts)} fresh); "
        f"{len(snap['ultraservers'])} UltraServer(s)",
        "",
        "findings (most severe first):",
        *(f"  {clean(line)}" for line in findings_text(snap["findings"])),
        "",
        "open incidents (most severe first; since when, last seen):",
        *(
            f"  #{i['id']} {i['severity']}: {clean(i['evidence']['text'])} (since {_hms(i['first'])}, last {_hms(i['last'])})"
            for i in snap.get("incidents", [])
        ),
        *([] if snap.get("incidents") else ["  none"]),
        "",
        "sources:",
    ]
    states: dict[str, int] = {}
    for s in snap["sources"]:
        states[s["state"]] = states.get(s["state"], 0) + 1
    lines.append(
        "  "
        + ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        + f"; {sum(s['rejected'] for s in snap['sources'])} rejected lines"
    )
    for s in snap["sources"]:
        if s["state"] not in ("connected", "ended") or s["rejected"]:
            age = "" if s["age_s"] is None else f", last line {s['age_s']:.0f} s ago"
            error = f", error: {clean(s['end_error'])}" if s["end_error"] else ""
            lines.append(f"  {clean(s['id'])}: {s['state']}{age}, {s['rejected']} rejected{error}")
    for us in snap["ultraservers"]:
        b = us["boundary"]
        capacity = us["hbm_capacity_bytes"]
        fill_pct = hbm_fill_pct(us["hbm_used_bytes"], capacity)
        share = "" if fill_pct is None else f" ({fill_pct:.1f}%)"
        lines += [
            "",
            f"UltraServer {clean(us['id'])} (figures over {b['chips_in_figures']} chips on {b['hosts_fresh']}/{b['hosts']} "
            "fresh hosts; UltraServer figures, not a chip's):",
            f"  HBM {_gib(us['hbm_used_bytes'])} of {_gib(capacity)}{share}; util mean {_pct(us['util_mean_pct'])}, "
            f"min {_pct(us['util_min_pct'])}; idle chips {us['chips_idle']}; chips with ECC events {us['chips_with_ecc']}",
        ]
    stale = [h for h in hosts if not h["fresh"]]
    if stale:
        lines += ["", "hosts not fresh (left out of UltraServer figures):"]
        for h in stale:
            last = "never" if h["age_s"] is None else f"{h['age_s']:.0f} s ago"
            lines.append(f"  {clean(h['instance_name'] or h['host'])} ({clean(h['host'])}): last report {last}")
    fresh_chips = [c for c in chips if c["host"] in fresh_hosts and c["util_pct"] is not None]
    names = {h["host"]: h["instance_name"] or h["host"] for h in hosts}
    if fresh_chips:
        lines += ["", "lowest utilisation (fresh chips, each figure one chip's):"]
        for c in sorted(fresh_chips, key=lambda c: (c["util_pct"], c["host"], c["device"]))[:lowest]:
            lines.append(
                f"  {clean(names[c['host']])} chip {c['device']}: util {_pct(c['util_pct'])}, "
                f"HBM {_gib(c['hbm_bytes'])} of {_gib(c['hbm_capacity_bytes'])}"
            )
    ecc = [c for c in chips if c["ecc"]["corrected"] or c["ecc"]["uncorrected"]]
    if ecc:
        lines += ["", "chips with ECC events:"]
        for c in ecc:
            totals = ", ".join(f"{k} {v}" for k, v in sorted(c["ecc"]["totals"].items()) if v)
            lines.append(f"  {clean(names[c['host']])} chip {c['device']}: {totals} (reading {c['ecc']['reading']})")
    job = snap["job"]
    lines += ["", "job:"]
    if job.get("connected") is False:
        lines.append("  no job telemetry connected: no step, throughput or collective figures")
    else:
        lines.append(f"  run {clean(job['run'])}: {job['verdict'].upper()} - {clean(job['reason'])}")
        for s in job["suspects"][:lowest]:
            chip = "?" if s["chip"] is None else s["chip"]
            lines.append(
                f"  suspect rank {s['rank']}: host {clean(s['host'] or '?')} chip {chip} "
                f"core {'?' if s['core'] is None else s['core']}, region {clean(s['region'] or 'n/a')}, "
                f"step {s['step']}: {clean(s['evidence']['why'])}"
            )
        if len(job["suspects"]) > lowest:
            lines.append(f"  ... {len(job['suspects']) - lowest} more suspect(s) in the JSON")
        r = job["ranks"]
        lines.append(
            f"  ranks: {r['running']} running, {r['finished']} finished, {r['failed']} failed, {r['dead']} dead"
            + (f", {r['unknown']} never heard from" if r["unknown"] else "")
            + f" (world size {r['world_size']})"
        )
        t = job["throughput"]
        if t:
            tokens = "tokens/s n/a" if t["tokens_per_s"] is None else f"{t['tokens_per_s']:,.0f} tokens/s"
            live = job["verdict"] in ("steady", "slow", "compiling", "checkpointing", "finished")
            lead = "" if live else "last steady "
            age = "" if live else f", {t['last_step_age_s']:.0f} s ago"
            lines.append(
                f"  {lead}{tokens} over steps {t['first_step']}-{t['last_step']}{age}; "
                f"step time p50 {t['step_time_s']['p50']} s"
            )
    return "\n".join(lines) + "\n"
