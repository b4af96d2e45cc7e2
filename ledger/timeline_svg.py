"""The receipt's picture: throughput, mean chip utilisation and HBM fill over the window, with
the job's phases shaded, its stalls marked and the session's incidents as spans. A pure function
of the receipt (its `timeline` buckets, job phases and incidents), so the same receipt always
draws the same SVG. Outside strings (the
run name) are escaped; nothing in the SVG is script or a link.
"""

import time

from trnwatch.ledger.incidents import incident_words, site_words, worst_first
from trnwatch.ledger.receipt import Receipt


def escape(text: str) -> str:
    """Text for SVG character data: &, < and > as entities (xml.sax.saxutils.escape's rule; that
    module imports urllib.request, which a session's start would pay for)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


WIDTH, HEIGHT = 960, 420
LEFT, RIGHT = 70, 40
TOP_PANEL = (50, 180)  # y of the throughput panel's top and bottom
BOTTOM_PANEL = (215, 345)  # utilisation / HBM panel
PHASE_FILL = {
    "init": "#c7c7c7",
    "compile": "#f4a259",
    "warmup": "#f6d55c",
    "checkpoint": "#6fa8dc",
    "restart": "#e06666",
    "probe": "#b4a7d6",
    "eval": "#b4a7d6",
}
THROUGHPUT = "#1f4e79"
UTIL = "#2e7d32"
HBM = "#8e44ad"
STALL = "#c0392b"
# Incidents: spans in the band between the panels, coloured by their worst severity, in lanes.
INCIDENT_BAND = (184, 211)
INCIDENT_LANES = 3
INCIDENT_LABELS = 4  # the worst ones get their label written beside their span
SEVERITY_FILL = {"critical": "#c0392b", "error": "#e67e22", "warning": "#d4ac0d"}


def _x(t: float, t0: float, t1: float) -> float:
    return LEFT + (WIDTH - LEFT - RIGHT) * (t - t0) / (t1 - t0)


def _polyline(
    points: list[tuple[float, float | None]],
    t0: float,
    t1: float,
    top: float,
    bottom: float,
    top_value: float,
    colour: str,
    dash: str = "",
) -> list[str]:
    """One line per run of known values: a gap in the data is a gap in the line, never bridged."""
    out: list[str] = []
    run: list[tuple[float, float]] = []
    for t, v in points + [(t1, None)]:
        if v is None:
            if run:
                coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
                extra = f' stroke-dasharray="{dash}"' if dash else ""
                out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"{extra}/>')
            run = []
            continue
        y = bottom - (bottom - top) * min(v, top_value) / top_value if top_value > 0 else bottom
        run.append((_x(t, t0, t1), y))
    return out


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    magnitude = 10 ** len(str(int(v))) / 10
    for step in (1, 2, 2.5, 5, 10):
        if v <= step * magnitude:
            return step * magnitude
    return 10 * magnitude


def _si(v: float) -> str:
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= factor:
            return f"{v / factor:g}{suffix}"
    return f"{v:g}"


def _incident_marks(r: Receipt, t0: float, t1: float) -> list[str]:
    """Each incident as a span from first seen to cleared (or the window's end while open): dead
    ranks and lost hosts show as the spans they lasted. The worst few are labelled."""
    out: list[str] = []
    lane_h = (INCIDENT_BAND[1] - INCIDENT_BAND[0]) / INCIDENT_LANES
    labelled = {i.id for i in worst_first(r.incidents)[:INCIDENT_LABELS]}
    for n, i in enumerate(sorted(r.incidents, key=lambda i: (i.first, i.id))):
        begin = max(i.first, t0)
        end = min(i.cleared if i.cleared is not None else t1, t1)
        if end < begin:
            continue
        x0, x1 = _x(begin, t0, t1), _x(end, t0, t1)
        y = INCIDENT_BAND[0] + lane_h * (n % INCIDENT_LANES)
        out.append(
            f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0, 2):.1f}" height="{lane_h - 2:.1f}" '
            f'fill="{SEVERITY_FILL[i.worst_severity]}" fill-opacity="0.8"><title>{escape(incident_words(i))}</title></rect>'
        )
        if i.id in labelled:
            out.append(
                f'<text x="{x0 + 3:.1f}" y="{y + lane_h - 3:.1f}" font-size="8">'
                f"{escape(i.label)} {escape(site_words(i.site))}</text>"
            )
    return out


def render_timeline_svg(r: Receipt) -> str:
    """The SVG text of the receipt's timeline picture."""
    points = r.timeline.points
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
    ]
    job = r.job
    phases = job.phases if job is not None else []
    run = escape(str((job.run if job is not None else None) or "no job"))
    out.append(
        f'<text x="{LEFT}" y="22" font-size="15" font-weight="bold">trnwatch receipt timeline: '
        f"{r.evidence.upper()}, run {run}</text>"
    )
    if not points:
        out.append(f'<text x="{LEFT}" y="80">No data in the window.</text></svg>')
        return "\n".join(out) + "\n"
    half = r.timeline.bucket_s / 2
    t0, t1 = points[0].t - half, points[-1].t + half
    if t1 <= t0:
        t1 = t0 + 1.0
    # phases (steady left unshaded: it is the productive state), then stalls
    for p in phases:
        fill = PHASE_FILL.get(p.phase)
        if fill is None:
            continue
        begin = max(p.begin_ts, t0)
        end = min(p.end_ts if p.end_ts is not None else t1, t1)
        if end <= begin:
            continue
        x0, x1 = _x(begin, t0, t1), _x(end, t0, t1)
        for top, bottom in (TOP_PANEL, BOTTOM_PANEL):
            out.append(
                f'<rect x="{x0:.1f}" y="{top}" width="{max(x1 - x0, 1):.1f}" height="{bottom - top}" '
                f'fill="{fill}" fill-opacity="0.35"/>'
            )
        out.append(f'<text x="{x0 + 2:.1f}" y="{TOP_PANEL[0] + 12}" font-size="10">{escape(p.phase)}</text>')
    for s in job.stalls if job is not None else []:
        begin = max(s.begin_ts, t0)
        end = min(s.end_ts if s.end_ts is not None else t1, t1)
        if end <= begin:
            continue
        x0, x1 = _x(begin, t0, t1), _x(end, t0, t1)
        out.append(
            f'<rect x="{x0:.1f}" y="{TOP_PANEL[0]}" width="{max(x1 - x0, 1):.1f}" '
            f'height="{BOTTOM_PANEL[1] - TOP_PANEL[0]}" fill="{STALL}" fill-opacity="0.08" stroke="{STALL}" stroke-width="2" '
            'stroke-dasharray="6,3"/>'
        )
        out.append(
            f'<text x="{x0 + 2:.1f}" y="{BOTTOM_PANEL[1] - 4}" fill="{STALL}" font-weight="bold">stall '
            f"{s.duration_s:.0f} s</text>"
        )
    out += _incident_marks(r, t0, t1)
    # axes and grid
    tps = [p.tokens_per_s for p in points if p.tokens_per_s is not None]
    tps_max = _nice_max(max(tps)) if tps else 1.0
    for top, bottom, label, scale in ((*TOP_PANEL, "tokens/s", tps_max), (*BOTTOM_PANEL, "% (util, HBM)", 100.0)):
        out.append(
            f'<rect x="{LEFT}" y="{top}" width="{WIDTH - LEFT - RIGHT}" height="{bottom - top}" fill="none" '
            'stroke="#555"/>'
        )
        for i in range(5):
            y = bottom - (bottom - top) * i / 4
            value = scale * i / 4
            text = _si(value) if label == "tokens/s" else f"{value:g}"
            out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{text}</text>')
        out.append(
            f'<text x="14" y="{(top + bottom) / 2:.1f}" transform="rotate(-90 14 {(top + bottom) / 2:.1f})" '
            f'text-anchor="middle">{label}</text>'
        )
    span = t1 - t0
    for i in range(7):
        t = t0 + span * i / 6
        x = _x(t, t0, t1)
        out.append(
            f'<text x="{x:.1f}" y="{BOTTOM_PANEL[1] + 16}" text-anchor="middle">'
            f"{time.strftime('%H:%M:%S', time.gmtime(t))}</text>"
        )
    out.append(
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{BOTTOM_PANEL[1] + 32}" text-anchor="middle">time (UTC), '
        f"{span:.0f} s window, {r.timeline.bucket_s:.2f} s buckets</text>"
    )
    # series
    series = [(p.t, p.tokens_per_s) for p in points]
    out += _polyline(series, t0, t1, *TOP_PANEL, tps_max, THROUGHPUT)
    out += _polyline([(p.t, p.util_mean_pct) for p in points], t0, t1, *BOTTOM_PANEL, 100.0, UTIL)
    out += _polyline([(p.t, p.hbm_used_pct) for p in points], t0, t1, *BOTTOM_PANEL, 100.0, HBM, "5,3")
    # legend
    y = HEIGHT - 14
    entries = [
        ("line", THROUGHPUT, "tokens/s (timeline rank)"),
        ("line", UTIL, "mean chip utilisation %"),
        ("dash", HBM, "mean HBM fill %"),
        ("box", STALL, "stall"),
    ]
    if r.incidents:
        entries.append(("fill", SEVERITY_FILL["critical"], "incident (critical, error, warning)"))
    entries += [("fill", colour, name) for name, colour in PHASE_FILL.items() if any(p.phase == name for p in phases)]
    x = LEFT
    for kind, colour, name in entries:
        if kind in ("line", "dash"):
            dash = ' stroke-dasharray="5,3"' if kind == "dash" else ""
            out.append(
                f'<line x1="{x}" y1="{y - 4}" x2="{x + 18}" y2="{y - 4}" stroke="{colour}" stroke-width="2"{dash}/>'
            )
        elif kind == "box":
            out.append(
                f'<rect x="{x}" y="{y - 10}" width="18" height="10" fill="none" stroke="{colour}" '
                'stroke-dasharray="4,2"/>'
            )
        else:
            out.append(f'<rect x="{x}" y="{y - 10}" width="18" height="10" fill="{colour}" fill-opacity="0.35"/>')
        out.append(f'<text x="{x + 22}" y="{y}">{escape(name)}</text>')
        x += 30 + 6.5 * len(name)
    out.append("</svg>")
    return "\n".join(out) + "\n"
