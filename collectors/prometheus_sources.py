"""The two Prometheus sources: scraping exporters' /metrics, and querying a Prometheus server.

Both poll on a fixed schedule (the next poll is armed only after the previous one finished, so
a slow endpoint never piles up requests), report their link like the SSH hosts ("connecting",
"down" with the error, retried with collectors/backoff.py under the same source id), and yield
`Line`s that collectors/prometheus.py turns into Reports inside the ledger.

Server mode asks the whole cluster a fixed, small set of PromQL queries per refresh, all at one
evaluation time (the `time` parameter) so they describe the same instant. Aggregation happens in
Prometheus, down to what the ledger needs per chip: per-core utilisation (max over runtimes
reporting a core, as the ledger does), per-core HBM summed over the five categories, ECC as a
device total with the per-counter split only for devices that have events, and host memory and
vCPU. At 1,152 hosts x 4 chips that is ~50k series per refresh instead of the ~320k the exporters
serve. The answers are split by `instance_id` into one "promql" line per host, on the event
loop in 5 ms slices, and yielded in chunks with a pause for the loop in between, so neither the
split nor the fold of a refresh blocks the screen for long, and a recording holds per-host lines
that replay the same way.
"""

import asyncio
import json
import random
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator

from trnwatch.collectors.backoff import Backoff
from trnwatch.collectors.lines import Line, LineKind, SourceEvent
from trnwatch.collectors.prometheus import MAX_BODY_BYTES, SIMULATOR_INFO
from trnwatch.collectors.prometheus_http import FetchError, fetch_async

# Per refresh: (series name to give the answers, or None to keep each series' own name; PromQL).
SERVER_QUERIES: tuple[tuple[str | None, str], ...] = (
    (None, f'{{__name__=~"instance_info|neuron_hardware_info|{SIMULATOR_INFO}"}}'),
    ("neuroncore_utilization_ratio", "max by (instance_id, runtime_tag, neuroncore) (neuroncore_utilization_ratio)"),
    (
        "neuroncore_memory_usage_total",
        'sum by (instance_id, runtime_tag, neuroncore) ({__name__=~"neuroncore_memory_usage_'
        '(constants|model_code|model_shared_scratchpad|runtime_memory|tensors)"})',
    ),
    ("hardware_ecc_events_total", "sum by (instance_id, neuron_device_index) (hardware_ecc_events_total)"),
    (
        "hardware_ecc_events_total",
        "sum by (instance_id, neuron_device_index, event_type) (hardware_ecc_events_total) > 0",
    ),
    ("system_vcpu_usage_ratio", "max by (instance_id, usage_type) (system_vcpu_usage_ratio)"),
    ("system_memory_total_bytes", "max by (instance_id) (system_memory_total_bytes)"),
    ("system_memory_used_bytes", "max by (instance_id) (system_memory_used_bytes)"),
)
# Series one refresh keeps (64 a host at MAX_HOSTS; 1,152 Trn3 Gen2 hosts answer about 58,000):
# past it the rest of the answers is read and dropped, and the refresh says how many (a line
# `{"series_dropped": N}`, rejected as `series-over-limit`), so a server answering with 800,000
# distinct series cannot size memory (1.35 GiB before; tests/benchmarks/bench_memory.py --series).
MAX_SERIES_PER_REFRESH = 262_144
# Lines folded between two pauses for the event loop (~10 ms of folding on a 2-core machine).
HOST_LINES_PER_CHUNK = 16
# Longest stretch of splitting answers on the event loop before it runs other work.
SPLIT_SLICE_S = 0.005
# How Prometheus writes a successful instant-vector answer (Go struct order, compact JSON).
_VECTOR_PREFIX = '{"status":"success","data":{"resultType":"vector","result":['
_DECODER = json.JSONDecoder()
# Prometheus' own target labels: not the exporter's, not needed, and they double a line's size.
_TARGET_LABELS = ("job", "instance")


def http_timeout_s(interval_s: float) -> float:
    """Total deadline of one scrape: two poll intervals, within 2-10 s (a hung or dripping
    request must not hold the source, or the exit, for long)."""
    return max(2.0, min(10.0, 2.0 * interval_s))


def query_timeout_s(interval_s: float) -> float:
    """Total deadline of one server query: three intervals, within 15-30 s. At cluster scale one
    answer is megabytes that a loaded server can take over 10 s to compute and send; the
    session's end still cuts a request off at once."""
    return max(15.0, min(30.0, 3.0 * interval_s))


class _Link:
    """Link state of one polling source: emits "connecting" / "down" and times the backoff."""

    def __init__(self, source_id: str, kind: LineKind, backoff: Backoff, rng: random.Random):
        self.source_id, self.kind, self.backoff, self.rng = source_id, kind, backoff, rng
        self.failures = 0
        self.up_since_s: float | None = None

    def connecting(self) -> SourceEvent:
        return SourceEvent(self.source_id, self.kind, time.time(), "connecting")

    def up(self) -> None:
        if self.up_since_s is None:
            self.up_since_s = time.monotonic()

    def down(self, error: str) -> tuple[SourceEvent, float]:
        """The "down" event and the seconds to wait before the next attempt."""
        up_for_s = time.monotonic() - self.up_since_s if self.up_since_s is not None else 0.0
        self.failures = self.backoff.failures_after(self.failures, up_for_s)
        self.up_since_s = None
        return SourceEvent(self.source_id, self.kind, time.time(), "down", error), self.backoff.delay_s(
            self.failures, self.rng
        )

    async def outage(self, error: str) -> AsyncIterator[SourceEvent]:
        """A failed attempt: "down" with the error, the backoff wait, then "connecting" again."""
        event, wait_s = self.down(error)
        yield event
        await asyncio.sleep(wait_s)
        yield self.connecting()


async def scrape_lines(
    url: str,
    interval_s: float,
    token: str | None = None,
    backoff: Backoff = Backoff(),
    rng: random.Random | None = None,
) -> AsyncIterator[Line | SourceEvent]:
    """Scrape one exporter's /metrics every `interval_s`; the source id is the URL."""
    link = _Link(url, "prometheus", backoff, rng or random.Random())
    yield link.connecting()
    while True:
        started_s = time.monotonic()
        try:
            body = await fetch_async(url, token, http_timeout_s(interval_s), MAX_BODY_BYTES)
        except FetchError as exc:
            async for event in link.outage(str(exc)):
                yield event
            continue
        link.up()
        text = json.dumps({"url": url, "interval_s": interval_s, "body": body.decode("utf-8", "replace")})
        yield Line(url, "prometheus", time.time(), text)
        await asyncio.sleep(max(0.0, started_s + interval_s - time.monotonic()))


def query_url(base_url: str, query: str, eval_s: float) -> str:
    """The instant-query URL of the HTTP API under a server's base URL (path prefixes kept)."""
    params = urllib.parse.urlencode({"query": query, "time": f"{eval_s:.3f}"})
    return f"{base_url.rstrip('/')}/api/v1/query?{params}"


class AnswerUnreadable(FetchError):
    """A query answered 200 with something that is not a successful instant vector."""


def _vector_rows(text: str) -> Iterator[dict]:
    """The rows of an instant-vector answer; AnswerUnreadable if it is not a successful one.

    Prometheus' own layout is decoded one row at a time: a 3 MB answer in a single `json.loads`
    is one C call of 70-140 ms, which nothing can interrupt; between rows the split pauses for
    the event loop. Any other layout (another server, whitespace) is decoded whole.
    """
    if text.startswith(_VECTOR_PREFIX):
        at = len(_VECTOR_PREFIX)
        while text[at] != "]":
            row, at = _DECODER.raw_decode(text, at)
            yield row
            if text[at] == ",":
                at += 1
        return
    doc = json.loads(text)
    if doc.get("status") != "success":
        raise AnswerUnreadable(f"query failed: {doc.get('errorType', '?')}: {str(doc.get('error', ''))[:200]}")
    data = doc["data"]
    if data.get("resultType") != "vector":
        raise AnswerUnreadable(f"query answered a {data.get('resultType')!r}, not an instant vector")
    yield from data["result"]


def _split(
    answers: list[tuple[str | None, bytes]], interval_s: float, eval_s: float, lines: list[str]
) -> Iterator[None]:
    """Split answers into `lines` (one per instance_id, sorted), a step per row and per line,
    so a caller can pause between steps."""
    hosts: dict[str, list[object]] = {}
    kept = dropped = 0
    for name, body in answers:
        text = body.decode("utf-8", "replace")
        yield  # a step of its own: 1-3 ms for a 3 MB answer
        try:
            for row in _vector_rows(text):
                labels = row["metric"]
                instance_id = labels.pop("instance_id", None)
                if instance_id is None:
                    continue  # not an exporter series (or relabelled beyond recognition)
                if kept >= MAX_SERIES_PER_REFRESH:
                    dropped += 1
                    continue
                kept += 1
                series = name or labels.pop("__name__", "")
                for target_label in _TARGET_LABELS:
                    labels.pop(target_label, None)
                # Flat (name, labels, value, name, ...): one tracked list per host, not a tuple
                # per sample that the garbage collector would walk (docs/scale-out.md).
                hosts.setdefault(instance_id, []).extend((series, labels, row["value"][1]))
                yield
        except AnswerUnreadable:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to read one answer is that answer's fault
            raise AnswerUnreadable(f"unreadable query answer ({type(exc).__name__})") from None
    if dropped:
        lines.append(json.dumps({"series_dropped": dropped, "series_kept": kept}))
    for instance_id in sorted(hosts):
        flat = hosts.pop(instance_id)  # freed step by step: 700 k objects at once took 19 ms
        samples = [flat[i : i + 3] for i in range(0, len(flat), 3)]
        lines.append(
            json.dumps(
                {"interval_s": interval_s, "eval_s": eval_s, "instance_id": instance_id, "samples": samples},
                separators=(",", ":"),
            )
        )
        yield


def host_lines(answers: list[tuple[str | None, bytes]], interval_s: float, eval_s: float) -> list[str]:
    """Split one refresh's query answers into one "promql" line per instance_id (sorted), after
    a line saying how many series were dropped past MAX_SERIES_PER_REFRESH, if any.

    Raises AnswerUnreadable when an answer is not a successful instant vector (whatever is wrong
    with it: malformed, cut short, nested beyond the decoder's depth).
    """
    lines: list[str] = []
    for _ in _split(answers, interval_s, eval_s, lines):
        pass
    return lines


async def host_lines_in_slices(
    answers: list[tuple[str | None, bytes]], interval_s: float, eval_s: float, slice_s: float = SPLIT_SLICE_S
) -> list[str]:
    """`host_lines` on the event loop, pausing for it every `slice_s` (a worker thread would
    only contend for the GIL with the loop: docs/scale-out.md)."""
    lines: list[str] = []
    deadline = time.perf_counter() + slice_s
    for _ in _split(answers, interval_s, eval_s, lines):
        if time.perf_counter() >= deadline:
            await asyncio.sleep(0)
            deadline = time.perf_counter() + slice_s
    return lines


async def promql_lines(
    base_url: str,
    interval_s: float,
    token: str | None = None,
    backoff: Backoff = Backoff(),
    rng: random.Random | None = None,
) -> AsyncIterator[Line | SourceEvent]:
    """Query a Prometheus server every `interval_s` for the whole cluster; one line per host.

    The source id is the base URL; the hosts inside are told apart by instance_id.
    """
    link = _Link(base_url, "promql", backoff, rng or random.Random())
    timeout_s = query_timeout_s(interval_s)
    yield link.connecting()
    while True:
        started_s = time.monotonic()
        eval_s = round(time.time(), 3)
        try:
            bodies = await asyncio.gather(
                *(
                    fetch_async(query_url(base_url, query, eval_s), token, timeout_s, MAX_BODY_BYTES)
                    for _, query in SERVER_QUERIES
                )
            )
            answers = [(name, body) for (name, _), body in zip(SERVER_QUERIES, bodies, strict=True)]
            lines = await host_lines_in_slices(answers, interval_s, eval_s)
        except AnswerUnreadable as exc:
            # The server answered, with something unusable: a rejected line of this source (so
            # counted, and replayed the same), not an outage.
            link.up()
            yield Line(base_url, "promql", time.time(), json.dumps({"unreadable": str(exc)}))
            await asyncio.sleep(max(0.0, started_s + interval_s - time.monotonic()))
            continue
        except FetchError as exc:
            async for event in link.outage(str(exc)):
                yield event
            continue
        link.up()
        received_s = time.time()
        for i, text in enumerate(lines, start=1):
            yield Line(base_url, "promql", received_s, text)
            if i % HOST_LINES_PER_CHUNK == 0:
                await asyncio.sleep(0)  # let the screen and other sources run between chunks
        await asyncio.sleep(max(0.0, started_s + interval_s - time.monotonic()))
