"""`--serve-metrics [HOST:]PORT`: the session's diagnosis as OpenMetrics text, for Prometheus.

A small HTTP/1.0 server on the session's event loop (default bind 127.0.0.1): `GET /metrics`
answers with the figures judged at the session's clock at that moment, from the same objects the
screen and the receipt read (the incident log, the job's diagnosis and throughput, the hosts'
freshness). Any other path is 404; a request line longer than MAX_REQUEST_BYTES or slower than
READ_TIMEOUT_S is dropped.

Label cardinality is bounded: verdicts, kinds, severities and host states are closed sets; the
per-incident series (`trnwatch_incident_open`, with site labels rank / host / instance_id / chip)
list at most MAX_INCIDENT_SERIES open incidents, most severe first, and
`trnwatch_incidents_open_unlisted` counts the rest. Outside strings in label values are escaped
as the format requires and cut to MAX_LABEL_CHARS.
"""

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from trnwatch.ledger.findings import KIND_ORDER, SEVERITIES
from trnwatch.ledger.job_summary import Verdict
from trnwatch.outside import clean

if TYPE_CHECKING:
    from trnwatch.session import Session

MAX_INCIDENT_SERIES = 20
MAX_LABEL_CHARS = 128
MAX_REQUEST_BYTES = 8192
READ_TIMEOUT_S = 5.0
VERDICTS: tuple[str, ...] = Verdict.__args__  # type: ignore[attr-defined]
CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# Families `trnwatch export --format openmetrics` writes under these same names.
VERDICT_METRIC = "trnwatch_job_verdict"
TOKENS_METRIC = "trnwatch_tokens_per_second"
INCIDENT_OPEN_METRIC = "trnwatch_incident_open"
# (export scope, column) -> the family this endpoint serves that figure under.
EXPORTED_NAMES = {("job", "tokens_per_s"): TOKENS_METRIC}


class MetricsError(ValueError):
    """A --serve-metrics address that cannot be used."""


def parse_address(spec: str) -> tuple[str, int]:
    """`PORT`, `HOST:PORT` or `[V6]:PORT` -> (host, port); the host defaults to 127.0.0.1."""
    host, _, port = spec.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise MetricsError(f"--serve-metrics: not [HOST:]PORT with a port from 1 to 65535: {spec!r}")
    return host, int(port)


def _label(value: object) -> str:
    text = clean(str(value))[:MAX_LABEL_CHARS]
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def label_set(**labels: object) -> str:
    shown = [f'{k}="{_label(v)}"' for k, v in labels.items() if v is not None]
    return "{" + ",".join(shown) + "}" if shown else ""


def render(session: "Session", now_s: float) -> str:
    """The OpenMetrics exposition of `session` at `now_s`."""
    ledger = session.ledger
    read = ledger.read(now_s)
    out: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, object]]) -> None:
        out.append(f"# TYPE {name} {kind}")
        out.append(f"# HELP {name} {help_text}")
        out.extend(f"{name}{suffix} {value}" for suffix, value in samples)

    family(
        "trnwatch_evidence",
        "gauge",
        "1 for what the figures are: live, simulated or replayed.",
        [(label_set(evidence=ledger.evidence), 1)],
    )
    diagnosis = read.diagnosis
    if diagnosis is not None:
        family(
            VERDICT_METRIC,
            "gauge",
            "1 for the job's current verdict, 0 for the others.",
            [(label_set(verdict=v), int(v == diagnosis.verdict)) for v in VERDICTS],
        )
        suspect = diagnosis.suspects[0] if diagnosis.suspects else None
        if suspect is not None:
            family(
                "trnwatch_job_suspect",
                "gauge",
                "The job's first suspect rank and where it runs (1 while named).",
                [(label_set(rank=suspect.rank, host=suspect.host, chip=suspect.chip, region=suspect.region), 1)],
            )
    opened = session.incidents.open_incidents()
    counts = Counter((i.kind, i.severity) for i in opened)
    family(
        "trnwatch_incidents_open",
        "gauge",
        "Open incidents by kind and severity.",
        [(label_set(kind=k, severity=s), counts.get((k, s), 0)) for k in KIND_ORDER for s in SEVERITIES],
    )
    family(
        INCIDENT_OPEN_METRIC,
        "gauge",
        f"One series per open incident with its site (the {MAX_INCIDENT_SERIES} most severe).",
        [
            (
                label_set(
                    id=i.id,
                    kind=i.kind,
                    label=i.label,
                    severity=i.severity,
                    rank=i.site.rank,
                    host=i.site.host,
                    instance_id=i.site.instance_id,
                    chip=i.site.chip,
                ),
                1,
            )
            for i in opened[:MAX_INCIDENT_SERIES]
        ],
    )
    family(
        "trnwatch_incidents_open_unlisted",
        "gauge",
        "Open incidents beyond the listed ones.",
        [("", max(0, len(opened) - MAX_INCIDENT_SERIES))],
    )
    family(
        "trnwatch_incidents",
        "counter",
        "Incidents opened in the session (kept and dropped).",
        [("_total", len(session.incidents.incidents()) + session.incidents.dropped)],
    )
    throughput = ledger.job.throughput(now_s) if ledger.job is not None else None
    if throughput is not None:
        if throughput.tokens_per_s is not None:
            family(TOKENS_METRIC, "gauge", "Steady tokens/s of the job.", [("", throughput.tokens_per_s)])
        p = throughput.step_time_s
        shown = [(name, v) for name, v in (("p50", p.p50), ("p90", p.p90), ("p99", p.p99)) if v is not None]
        family(
            "trnwatch_step_time_seconds",
            "gauge",
            "Steady step time percentiles (a gauge: `quantile` is a summary's label).",
            [(label_set(percentile=name), v) for name, v in shown],
        )
    states = Counter(read.freshness.values())
    family(
        "trnwatch_hosts",
        "gauge",
        "Hosts by freshness.",
        [(label_set(state=s), states.get(s, 0)) for s in ("fresh", "stale", "lost")],
    )
    lag = ledger.lag
    family(
        "trnwatch_behind_seconds",
        "gauge",
        'How far trnwatch\'s reading is behind now, per source ("intake": the sources that push lines).',
        [(label_set(source=k), v) for k, v in sorted(lag.behind_s(read.now_s).items())],
    )
    family(
        "trnwatch_pauses",
        "counter",
        "Times trnwatch's event loop was not scheduled for 1 s or more.",
        [("_total", lag.pauses)],
    )
    sources = ledger.sources.values()
    family("trnwatch_reports", "counter", "Lines folded.", [("_total", sum(s.reports for s in sources))])
    family(
        "trnwatch_rejected_lines",
        "counter",
        "Lines rejected.",
        [("_total", sum(sum(s.rejected.values()) for s in sources))],
    )
    if session.alerts is not None:
        c = session.alerts.counted()
        family(
            "trnwatch_alerts",
            "counter",
            "Alerts by result.",
            [
                ("_total" + label_set(result=r), n)
                for r, n in (("sent", c.sent), ("failed", c.failed), ("suppressed", c.suppressed))
            ],
        )
    family(
        "trnwatch_session_seconds",
        "gauge",
        "Seconds since the session started.",
        [("", round(time.time() - session.started_s, 3))],
    )
    out.append("# EOF")
    return "\n".join(out) + "\n"


def metrics_server(session: "Session", spec: str) -> Callable[[], Coroutine[Any, Any, None]]:
    """The server as a session background task (the address is checked now, bound when it runs)."""
    host, port = parse_address(spec)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            line = request.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "GET" and parts[1].split("?")[0] == "/metrics":
                body = render(session, session.now_s()).encode()
                head = f"HTTP/1.0 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {len(body)}\r\n\r\n"
            else:
                body = b"not found: GET /metrics\n"
                head = f"HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n"
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    async def serve() -> None:
        try:
            server = await asyncio.start_server(handle, host, port, limit=MAX_REQUEST_BYTES)
        except OSError as exc:
            session.notice(f"--serve-metrics: cannot listen on {host}:{port}: {exc.strerror or exc}")
            return
        async with server:
            await server.serve_forever()

    return serve
