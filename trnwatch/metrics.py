"""`--serve-metrics [HOST:]PORT`: the session's diagnosis as OpenMetrics text, for Prometheus.

A small HTTP/1.0 server on the session's event loop (default bind 127.0.0.1): `GET /metrics`
answers with the figures judged at the session's clock at that moment, from the same objects the
screen and the receipt read (the incident log, the job's diagnosis and throughput, the hosts'
freshness). Any other path is 404; a request line longer than MAX_REQUEST_BYTES is dropped, and
so is a connection whose exchange (request, answer, close) takes longer than READ_TIMEOUT_S.

Connections are bounded (`Connections`): at most `connection_cap()` at once (32, or a sixteenth
of the descriptor limit), and a quarter of the descriptor limit is kept free for the sources; past
either a connection is closed unserved, the oldest one still sending its request first (a
half-open or slow client, never a scraper that sent its request), counted in
`trnwatch_metrics_connections_closed_total` and said once.

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

from trnwatch.collectors.descriptors import descriptors_free, soft_limit
from trnwatch.ledger.findings import KIND_ORDER, SEVERITIES
from trnwatch.ledger.job_summary import Verdict
from trnwatch.outside import clean

if TYPE_CHECKING:
    from trnwatch.session import Session

MAX_INCIDENT_SERIES = 20
MAX_LABEL_CHARS = 128
MAX_REQUEST_BYTES = 8192
READ_TIMEOUT_S = 5.0  # a connection's whole exchange (request, answer, close), then it is closed
MAX_CONNECTIONS = 32  # served at once (connection_cap)
RESERVE_FRACTION = 4  # a quarter of the soft descriptor limit is kept free for the sources
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


def render(session: "Session", now_s: float, connections: "Connections | None" = None) -> str:
    """The OpenMetrics exposition of `session` at `now_s` (with the server's own connection
    counts when it serves them)."""
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
    if connections is not None:
        family(
            "trnwatch_metrics_connections_closed",
            "counter",
            "Connections to this endpoint closed unserved: past the cap, or to keep descriptors for the sources.",
            [
                ("_total" + label_set(reason=r), n)
                for r, n in (("cap", connections.closed_over_cap), ("reserve", connections.closed_for_reserve))
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


def connection_cap() -> int:
    """Connections served at once: MAX_CONNECTIONS, or a sixteenth of the soft descriptor limit
    when that is lower (at least 1)."""
    soft = soft_limit()
    return MAX_CONNECTIONS if soft is None else max(1, min(MAX_CONNECTIONS, soft // 16))


def descriptor_reserve() -> int:
    """Descriptors kept free for the sources: a connection that would leave fewer is closed."""
    soft = soft_limit()
    return 0 if soft is None else soft // RESERVE_FRACTION


class Connections:
    """The server's connections: those still sending their request (oldest first) and those being
    answered, at most `cap` together. Past the cap a new connection takes the place of the oldest
    one still sending its request (a slow or half-open client; a scraper sends its request at
    once), or is closed when every one is being answered; either way `closed_over_cap` counts it.
    One that would leave fewer than `reserve` descriptors free is closed too (`closed_for_reserve`)."""

    def __init__(self, cap: int, reserve: int):
        self.cap, self.reserve = cap, reserve
        self.sending: dict[asyncio.StreamWriter, None] = {}  # insertion order: oldest first
        self.answering = 0
        self.closed_over_cap = 0
        self.closed_for_reserve = 0

    def admit(self, writer: asyncio.StreamWriter) -> bool:
        """Whether `writer`'s connection is served (then it is among `sending`); else it is closed."""
        if len(self.sending) + self.answering >= self.cap:
            self.closed_over_cap += 1
            if not self.sending:
                writer.transport.abort()
                return False
            oldest = next(iter(self.sending))
            del self.sending[oldest]
            oldest.transport.abort()
        free = descriptors_free()
        if free is not None and free < self.reserve:
            self.closed_for_reserve += 1
            writer.transport.abort()
            return False
        self.sending[writer] = None
        return True


def metrics_server(session: "Session", spec: str) -> Callable[[], Coroutine[Any, Any, None]]:
    """The server as a session background task (the address is checked now, bound when it runs)."""
    host, port = parse_address(spec)
    connections = Connections(connection_cap(), descriptor_reserve())
    said = False

    def say_closed() -> None:
        nonlocal said
        if not said and (connections.closed_over_cap or connections.closed_for_reserve):
            said = True
            session.notice(
                f"--serve-metrics: more connections than it serves ({connections.cap} at once, and "
                f"{connections.reserve} descriptors kept free for the sources): the oldest one still "
                "sending its request is closed first (counted in trnwatch_metrics_connections_closed_total)"
            )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        admitted = connections.admit(writer)
        say_closed()
        if not admitted:
            return
        answered = False
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):  # the whole exchange: request, answer, close
                request = await reader.readuntil(b"\r\n\r\n")
                if writer not in connections.sending:
                    return  # taken over by a newer connection meanwhile: already closed
                del connections.sending[writer]
                connections.answering += 1
                answered = True
                line = request.split(b"\r\n", 1)[0].decode("latin-1")
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "GET" and parts[1].split("?")[0] == "/metrics":
                    body = render(session, session.now_s(), connections).encode()
                    head = f"HTTP/1.0 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {len(body)}\r\n\r\n"
                else:
                    body = b"not found: GET /metrics\n"
                    head = f"HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n"
                writer.write(head.encode() + body)
                await writer.drain()
                writer.close()
                await writer.wait_closed()  # a client that never reads its answer holds no descriptor past the deadline
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.transport.abort()
        finally:
            connections.sending.pop(writer, None)
            if answered:
                connections.answering -= 1

    async def serve() -> None:
        try:
            # backlog: connections asyncio accepts in one go is the backlog too, so a burst of them
            # never takes more descriptors than the cap before `admit` sees them.
            server = await asyncio.start_server(handle, host, port, limit=MAX_REQUEST_BYTES, backlog=connections.cap)
        except OSError as exc:
            session.notice(f"--serve-metrics: cannot listen on {host}:{port}: {exc.strerror or exc}")
            return
        async with server:
            await server.serve_forever()

    return serve
